package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/redis/go-redis/v9"
)

// A record is one Redis string (docs/backends.md shows the forms), so that
// a claim of a free key is one SET … NX, and a replay or a read one GET,
// without a script:
//
//	c<expires>:<keep>:<created>:<token>:<n>:<fingerprint>     a claim
//	s<expires>:<keep>:<created>:<token>:<n>:<fingerprint><steps>  a claim with steps
//	o<fence>:<created>:<expires>:<n>:<fingerprint><response>  a completed outcome
//	n<fence>:<created>:<expires>:<n>:<fingerprint>            a not-replayable outcome
//	r<fence>, d<fence>                                        a released or deleted record's tombstone
//	t<fence>:<n>:<fingerprint><steps>                         a released claim's tombstone that keeps its steps
//
// where n is the fingerprint's length in bytes, and steps is their count
// and each step's name and result, each preceded by its length:
// <count>:<len>:<name><len>:<result>…. A claim takes the form s with its
// first step (RecordStep), and a claim's release leaves t only when it had
// steps: a claim without steps, and every fast path that reads no further
// than its fingerprint, are as they were before steps. (A claim of form c
// never holds anything after its fingerprint; a response found there,
// written by hand, is reported by the claim that takes the record over,
// as an outcome's would be.)
//
// A claim's times are relative to its fence, and its fence to the key's
// expiry: fence = PEXPIRETIME − keep. So a claim is written by a plain
// SET … NX PX keep, whose expiry the server sets by its own clock, and its
// fence is the server's clock at that SET, read back by PEXPIRETIME in the
// same transaction. A key is free only once its last record's key expired,
// which is never before the clock passed its fence plus the clock step: so
// a new claim's fence is above every earlier one (the fence rule of
// store.Store), as the scripts' max(fence + 1, now) makes it on a key that
// is not free. Redis keeps absolute expiries, and replicates them so. A
// step that moves the key's expiry later raises keep by as much, so that
// the rule fence = PEXPIRETIME − keep holds.
//
// A record is live while it is a claim or an outcome and the server's
// clock is before its expires; a tombstone is never live.

// claimValue is the value of a new claim of a free key, whose key expires
// keep ms after its fence.
func claimValue(ttl, keep int64, token, fp string) string {
	b := make([]byte, 0, 32+len(token)+len(fp))
	b = append(b, 'c')
	b = strconv.AppendInt(b, ttl, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, keep, 10)
	b = append(b, ":0:"...)
	b = append(b, token...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(len(fp)), 10)
	b = append(b, ':')
	b = append(b, fp...)
	return string(b)
}

// stored is a record as Redis holds it.
type stored struct {
	form  byte // c, s, o, n, r, d, t
	rec   store.Record
	token string // a claim's
	body  string // what follows the fingerprint: an outcome's response
}

// live reports whether s is a claim or an outcome the clock (Unix ms) has
// not passed.
func (s stored) live(now int64) bool {
	return s.form != 'r' && s.form != 'd' && s.form != 't' && now < s.rec.ExpiresAt.UnixMilli()
}

// claim reports whether s is a claim (with or without steps).
func (s stored) claim() bool { return s.form == 'c' || s.form == 's' }

// malformed is the error of a value the store cannot read.
func malformed(op string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "a malformed record in Redis", nil)
}

// parseStored decodes the value v of key's record, whose Redis key expires
// at keep (Unix ms; only a claim needs it).
func parseStored(op, key, v string, keep int64) (stored, error) {
	if v == "" {
		return stored{}, malformed(op)
	}
	s := stored{form: v[0], rec: store.Record{Key: key}}
	rest := v[1:]
	num := func() int64 {
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			return -1 << 62
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		rest = rest[i+1:]
		if err != nil {
			return -1 << 62
		}
		return n
	}
	const bad = -1 << 62
	switch s.form {
	case 'c', 's':
		exp, k, created := num(), num(), num()
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			return stored{}, malformed(op)
		}
		s.token, rest = rest[:i], rest[i+1:]
		n := num()
		f := keep - k
		if exp == bad || k <= 0 || created == bad || n < 0 || int64(len(rest)) < n || keep <= 0 || f < 0 || uint64(f) > uint64(idemkit.FenceMax) {
			return stored{}, malformed(op)
		}
		s.rec.Fingerprint, s.body = rest[:n], rest[n:]
		if s.form == 's' {
			steps, ok := parseSteps(s.body)
			if !ok {
				return stored{}, malformed(op)
			}
			s.rec.Steps, s.body = steps, ""
		}
		s.rec.State = store.StateClaimed
		s.rec.Fence = idemkit.Fence(f)
		s.rec.CreatedAt = time.UnixMilli(f + created)
		s.rec.ExpiresAt = time.UnixMilli(f + exp)
	case 't':
		// A released claim's steps, kept for the next claim of its
		// fingerprint, which the claim script carries them to: a read
		// needs only the fence.
		f := num()
		if f < 0 || uint64(f) > uint64(idemkit.FenceMax) {
			return stored{}, malformed(op)
		}
		s.rec.Fence = idemkit.Fence(f)
	case 'r', 'd':
		if !strings.Contains(rest, ":") {
			f, err := strconv.ParseUint(rest, 10, 64)
			if err != nil || f > uint64(idemkit.FenceMax) {
				return stored{}, malformed(op)
			}
			s.rec.Fence = idemkit.Fence(f)
			break
		}
		fallthrough // a tombstone made of an outcome by hand
	case 'o', 'n':
		f, created, exp, n := num(), num(), num(), num()
		if f < 0 || created < 0 || exp < 0 || n < 0 || int64(len(rest)) < n || uint64(f) > uint64(idemkit.FenceMax) {
			return stored{}, malformed(op)
		}
		s.rec.Fence = idemkit.Fence(f)
		s.body = rest[n:]
		if s.form == 'r' || s.form == 'd' {
			break
		}
		s.rec.State = store.StateCompleted
		if s.form == 'n' {
			s.rec.State = store.StateNotReplayable
		}
		s.rec.CreatedAt, s.rec.ExpiresAt = time.UnixMilli(created), time.UnixMilli(exp)
		s.rec.Fingerprint = rest[:n]
		if s.body != "" {
			s.rec.Response = []byte(s.body)
		}
	default:
		return stored{}, malformed(op)
	}
	return s, nil
}

// parseSteps decodes the steps of a claim of form s, "<count>:" and each
// step's "<len>:<name><len>:<result>", into steps of their own (a result
// is a copy; an empty one is nil); ok false when v is malformed.
func parseSteps(v string) (steps []store.Step, ok bool) {
	length := func() int {
		i := strings.IndexByte(v, ':')
		if i < 1 || i > 8 {
			return -1
		}
		n, err := strconv.Atoi(v[:i])
		if err != nil || n < 0 || n > len(v)-i-1 {
			return -1
		}
		v = v[i+1:]
		return n
	}
	count := length()
	if count < 1 || count > store.MaxSteps {
		return nil, false
	}
	steps = make([]store.Step, count)
	for i := range steps {
		n := length()
		if n < 1 {
			return nil, false
		}
		steps[i].Name, v = strings.Clone(v[:n]), v[n:] // not holding on to the whole value
		if n = length(); n < 0 {
			return nil, false
		}
		if n > 0 {
			steps[i].Result = []byte(v[:n])
		}
		v = v[n:]
	}
	return steps, v == ""
}

// outcomeForm is an outcome state's form.
func outcomeForm(st store.State) string {
	if st == store.StateNotReplayable {
		return "n"
	}
	return "o"
}

// tx runs cmds, commands on one record's key, as one transaction (MULTI …
// EXEC) in one round trip, and returns their replies (nil for a nil
// reply). On a client of one server (a *redis.Client, failover ones
// included) the transaction goes through the store's batcher like any
// call; through a cluster or a ring, whose pipelines route each command by
// its key, go-redis's transaction pipeline sends it alone.
func (s *Store) tx(ctx context.Context, op string, cmds ...*redis.Cmd) ([]any, error) {
	if s.direct {
		all := make([]redis.Cmder, 0, len(cmds)+2)
		multi, exec := redis.NewCmd(ctx, argsMulti...), redis.NewCmd(ctx, argsExec...)
		all = append(all, multi)
		for _, c := range cmds {
			all = append(all, c)
		}
		all = append(all, exec)
		if err := s.batch.do(ctx, all...); err != nil {
			return nil, err
		}
		vals, ok := exec.Val().([]any)
		if !ok || len(vals) != len(cmds) {
			return nil, replyError(op)
		}
		for _, v := range vals {
			if err, ok := v.(error); ok {
				return nil, err
			}
		}
		return vals, nil
	}
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range cmds {
			_ = p.Process(ctx, c)
		}
		return nil
	})
	vals := make([]any, len(cmds))
	for i, c := range cmds {
		switch cerr := c.Err(); {
		case errors.Is(cerr, redis.Nil):
		case cerr != nil:
			return nil, cerr
		default:
			vals[i] = c.Val()
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return vals, nil
}

// Commands without arguments but a key, shared by every call (go-redis
// keeps a command's arguments as given and never changes them).
var (
	argsMulti = []any{"multi"}
	argsExec  = []any{"exec"}
)

// readCmds returns the commands that read the record under the Redis key
// rk and the server's clock: PEXPIRETIME (the key's expiry, Unix ms) and
// PTTL (what remains of it: the clock is their difference).
func readCmds(ctx context.Context, rk any) (keep, left *redis.Cmd) {
	return redis.NewCmd(ctx, "pexpiretime", rk), redis.NewCmd(ctx, "pttl", rk)
}

// read reads key's record and the server's clock in one transaction
// (GET, PEXPIRETIME, PTTL), or by readOutOfMemory on a server over its
// maxmemory: found false when there is no key.
func (s *Store) read(ctx context.Context, op, key string) (rec stored, now int64, found bool, err error) {
	rk := any(s.redisKey(key))
	keep, left := readCmds(ctx, rk)
	vals, err := s.tx(ctx, op, redis.NewCmd(ctx, "get", rk), keep, left)
	if err != nil && redis.HasErrorPrefix(err, "OOM") {
		return s.readOutOfMemory(ctx, op, key)
	}
	if err != nil {
		return stored{}, 0, false, mapError(op, err)
	}
	return decodeRead(op, key, vals)
}

// readOutOfMemory is read on a server over its maxmemory, which refuses
// every command queued in a MULTI: the read-only script reads the same.
func (s *Store) readOutOfMemory(ctx context.Context, op, key string) (rec stored, now int64, found bool, err error) {
	v, err := s.run(ctx, key, scriptRead)
	if err != nil {
		return stored{}, 0, false, mapError(op, err)
	}
	vals, _ := v.([]any)
	if len(vals) != 3 {
		return stored{}, 0, false, replyError(op)
	}
	return decodeRead(op, key, vals)
}

// decodeRead decodes the replies of GET (or SET … GET), PEXPIRETIME and
// PTTL: found false when GET found nothing; now is the server's clock
// (Unix ms) when it found something.
func decodeRead(op, key string, vals []any) (rec stored, now int64, found bool, err error) {
	if vals[0] == nil {
		return stored{}, 0, false, nil
	}
	v, ok1 := vals[0].(string)
	keep, ok2 := vals[1].(int64)
	left, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return stored{}, 0, false, replyError(op)
	}
	if keep < 0 || left < 0 {
		return stored{}, 0, false, malformed(op) // a key without expiry: not the store's
	}
	rec, err = parseStored(op, key, v, keep)
	return rec, keep - left, err == nil, err
}
