package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var (
	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
	_ store.Stepper = (*Store)(nil)
)

const (
	defaultTable        = "idemkit_records"
	defaultMaxClockStep = time.Minute
	defaultMaxClockSkew = time.Second
)

// maxAttempts is how many conditional writes one claim tries while the
// item keeps changing under it (each loss means another write landed)
// before it gives up (ServiceUnavailable).
const maxAttempts = 16

// Option configures [New] and [CreateTable].
type Option func(*config)

type config struct {
	table       string
	maxResponse int
	step        time.Duration // the largest clock step fences survive
	skew        time.Duration // the largest difference between clients' clocks that leases survive
	clock       func() time.Time
}

// WithTable sets the table of the record items: 3 to 255 characters of
// letters, digits, "_", "-" and ".", DynamoDB's rule. Default:
// "idemkit_records".
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithMaxResponseBytes sets the largest response Complete and Put accept,
// 1 to 409,600; a larger one, or one whose record item would not fit
// DynamoDB's 400 KB, is refused with an error matching [store.ErrTooLarge]
// before any write. Default: 409,600, so only the item limit applies.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithMaxClockStep sets the largest step back of a client's clock that
// fences survive ([store.Store]): a tombstone is kept until the clock
// passes its fence (in Unix ms) plus d. 0 or more. Default: a minute.
func WithMaxClockStep(d time.Duration) Option { return func(c *config) { c.step = d } }

// WithMaxClockSkew sets how far apart the clocks of the store's clients
// may be without a lease being taken over early: a client takes over a
// claim only once its clock is d past the claim's expiry. A client whose
// clock runs ahead of the holder's by more than d takes over that much
// early; the fence still refuses the old holder's writes. 0 or more.
// Default: a second.
func WithMaxClockSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

func newConfig(opts []Option) (config, error) {
	c := config{table: defaultTable, maxResponse: maxItemBytes, step: defaultMaxClockStep, skew: defaultMaxClockSkew, clock: time.Now}
	for _, o := range opts {
		if o == nil {
			return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "an option is nil", nil)
		}
		o(&c)
	}
	bad := func(detail string) (config, error) {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil)
	}
	if detail := checkTable(c.table); detail != "" {
		return bad("the table name " + detail)
	}
	switch {
	case c.maxResponse < 1 || c.maxResponse > maxItemBytes:
		return bad(fmt.Sprintf("the maximum response size must be 1 to %d bytes", maxItemBytes))
	case c.step < 0:
		return bad("the largest clock step must not be negative (0 trusts the clients' clocks never to step back)")
	case c.skew < 0:
		return bad("the largest clock skew must not be negative (0 trusts the clients' clocks to agree)")
	}
	return c, nil
}

// checkTable returns what is wrong with a table name, or "".
func checkTable(name string) string {
	if len(name) < 3 || len(name) > 255 {
		return "must be 3 to 255 characters"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Sprintf("has a character outside [A-Za-z0-9_.-] at byte %d", i)
		}
	}
	return ""
}

// Store is the DynamoDB engine: a [store.Store], [store.Records] and
// [store.Lister], and a finder of lock claims ([Store.FindClaim]). Its methods are safe for
// concurrent use. The zero value is not usable; call [New].
type Store struct {
	client *dynamodb.Client
	cfg    config
}

// New returns a store on client. It validates the options
// (InvalidArgument) and sends nothing to DynamoDB; the table must exist
// ([CreateTable]).
func New(client *dynamodb.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a DynamoDB client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Store{client: client, cfg: cfg}, nil
}

func (s *Store) now() int64 { return s.cfg.clock().UnixMilli() }

func (s *Store) pk(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: encodeKey(key)}}
}

// values returns the expression values the expressions exprs use, among
// :now, :cut (now less the skew margin), :claimed, :released and more
// (DynamoDB refuses a value no expression uses).
func (s *Store) values(now int64, more map[string]types.AttributeValue, exprs ...string) map[string]types.AttributeValue {
	all := strings.Join(exprs, " ")
	m := make(map[string]types.AttributeValue, 4+len(more))
	for name, v := range more {
		m[name] = v
	}
	for name, v := range map[string]int64{":now": now, ":cut": now - s.cfg.skew.Milliseconds(), ":claimed": int64(store.StateClaimed), ":released": int64(released)} {
		if strings.Contains(all, name) {
			m[name] = num(v)
		}
	}
	return m
}

// The conditions, over the values of [Store.values]. A claim runs out for
// its takers at :cut (now less the skew margin), for its holder at :now.
// They are written as ORs of flat ANDs: dynalite's expression parser
// backtracks on nested parentheses, and the nested form of the claim's
// condition cost it 25 ms per request against 1.7 ms for this one
// (DynamoDB reads both alike). condClaimable leaves out a run-out claim or
// a tombstone that carries steps (sc): a claim overwriting it would drop
// steps it may have to carry, so Claim takes it over by [Store.takeOver].
// condDeletable is a live record, or any item that carries steps (an
// outcome never does).
const (
	condLive      = "(st = :claimed AND ex > :cut) OR (st > :claimed AND ex > :now)"
	condClaimable = "attribute_not_exists(pk) OR (fe < :fence AND st = :released AND attribute_not_exists(sc)) OR (fe < :fence AND st = :claimed AND ex <= :cut AND attribute_not_exists(sc)) OR (fe < :fence AND st > :claimed AND ex <= :now)"
	condHeld      = "fe = :fence AND st = :claimed AND ex > :now"
	condDeletable = condLive + " OR attribute_exists(sc)"
	condPut       = "attribute_not_exists(pk) OR fe <= :fence OR NOT (" + condLive + ")"
)

// read reads key's item with a strongly consistent read.
func (s *Store) read(ctx context.Context, op, key string) (*item, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.cfg.table, Key: s.pk(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, mapError(ctx, op, err)
	}
	return decode(op, key, out.Item)
}

// refused returns the item a refused condition met: the one DynamoDB sent
// back with the refusal (ReturnValuesOnConditionCheckFailure), else, on an
// endpoint that sends none (dynalite), a consistent read.
func (s *Store) refused(ctx context.Context, op, key string, old map[string]types.AttributeValue) (*item, error) {
	if len(old) > 0 {
		return decode(op, key, old)
	}
	return s.read(ctx, op, key)
}

// Claim implements [store.Store]: one conditional PutItem of the new
// claim, whose fence is the client's clock in Unix ms, conditioned on the
// key being claimable and its item's fence lower. DynamoDB answers a
// refusal with the item (a replay or a busy key: one round trip; dynalite
// sends none back, so there it reads it: two). A refusal by a claimable
// item whose fence is not lower (a clock behind, claims within one ms) is
// tried again with that fence plus one. A refusal by this call's own claim
// (its write id: the SDK retried a PutItem whose first answer was lost) is
// the claim made. A run-out claim or a tombstone that carries steps
// refuses the PutItem too, and is taken over by one more write
// ([Store.takeOver]) that carries its steps to the new claim when the
// fingerprint is the same.
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key), engine.ValidateTTL(op, ttl), s.checkFingerprint(op, key, fp)); err != nil {
		return store.Record{}, false, err
	}
	var (
		floor idemkit.Fence // the fence of the claimable item the last attempt met
		ids   []string      // the write ids of this call's PutItems
	)
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			return store.Record{}, false, contention(op)
		}
		now := s.now()
		fence := max(floor+1, idemkit.Fence(max(now, 1)))
		if fence > idemkit.FenceMax {
			return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("fence overflow: the next fence %s exceeds the maximum %s", fence, idemkit.FenceMax), nil)
		}
		expires := sat(now, ttl.Milliseconds())
		c := &contents{
			key: key, fp: fp, state: store.StateClaimed, fence: fence, expires: expires, created: now,
			expireAt: expireAt(expires, fence, true, s.cfg.step, s.cfg.skew), writeID: newWriteID(),
		}
		ids = append(ids, c.writeID)
		out, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           &s.cfg.table,
			Item:                                c.item(),
			ConditionExpression:                 aws.String(condClaimable),
			ExpressionAttributeValues:           s.values(now, map[string]types.AttributeValue{":fence": num(int64(fence))}, condClaimable),
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			rec := store.Record{
				Key: key, Fingerprint: fp, State: store.StateClaimed, Fence: fence,
				CreatedAt: time.UnixMilli(now), ExpiresAt: time.UnixMilli(expires),
			}
			if old, err := decode(op, key, out.Attributes); err == nil && old != nil && len(old.response) > 0 {
				rec.Replaced = &store.Record{Fingerprint: old.fp, Response: old.response}
			}
			return rec, true, nil
		}
		failed, sent := conditionFailed(err)
		if !failed {
			return store.Record{}, false, mapError(ctx, op, err)
		}
		it, err := s.refused(ctx, op, key, sent)
		if err != nil {
			return store.Record{}, false, err
		}
		if it == nil {
			continue // deleted since: claim again
		}
		if it.state == store.StateClaimed && slices.Contains(ids, it.writeID) {
			return it.record(), true, nil // a PutItem whose answer was lost
		}
		if it.live(s.now(), s.cfg.skew.Milliseconds()) {
			return it.record(), false, nil
		}
		floor = it.fence
		if len(it.steps) > 0 {
			rec, done, err := s.takeOver(ctx, it, fp, ttl, &ids)
			if done || err != nil {
				return rec, done, err
			}
		}
	}
}

// takeOver claims key from it, a run-out claim or a tombstone that
// carries steps, by one write conditioned on the item being it still (its
// fence, state, expiry and step count): an UpdateItem that keeps its
// steps for the new claim when they are fp's and their keep has not run
// out, else a PutItem of the new claim without them. The new claim is
// kept at least as long as it was. done = false when the item changed
// since it was read (the caller tries again).
func (s *Store) takeOver(ctx context.Context, it *item, fp string, ttl time.Duration, ids *[]string) (store.Record, bool, error) {
	const op = "claim"
	now := s.now()
	fence := max(it.fence+1, idemkit.Fence(max(now, 1)))
	if fence > idemkit.FenceMax {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("fence overflow: the next fence %s exceeds the maximum %s", fence, idemkit.FenceMax), nil)
	}
	expires := sat(now, ttl.Milliseconds())
	c := &contents{
		key: it.key, fp: fp, state: store.StateClaimed, fence: fence, expires: expires, created: now,
		expireAt: expireAt(expires, fence, true, s.cfg.step, s.cfg.skew), writeID: newWriteID(),
	}
	*ids = append(*ids, c.writeID)
	const pin = "fe = :of AND st = :os AND ex = :oe AND sc = :on"
	values := map[string]types.AttributeValue{
		":of": num(int64(it.fence)), ":os": num(int64(it.state)), ":oe": num(it.expires), ":on": num(int64(len(it.steps))),
	}
	rec := store.Record{
		Key: it.key, Fingerprint: fp, State: store.StateClaimed, Fence: fence,
		CreatedAt: time.UnixMilli(now), ExpiresAt: time.UnixMilli(expires),
	}
	var err error
	if it.fp == fp && it.stepsKept(now) {
		set := "SET st = :st, fe = :fe, ex = :ex, ca = :ca, expireAt = :expireAt, wid = :wid"
		values[":st"], values[":fe"], values[":ex"], values[":ca"] = num(int64(store.StateClaimed)), num(int64(fence)), num(expires), num(now)
		values[":expireAt"], values[":wid"] = num(max(c.expireAt, it.expireAt)), &types.AttributeValueMemberS{Value: c.writeID}
		if engine.LockID(fp) {
			set += ", lockId = :lockId"
			values[":lockId"] = &types.AttributeValueMemberS{Value: fp}
		}
		_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.cfg.table, Key: s.pk(it.key), UpdateExpression: aws.String(set),
			ConditionExpression: aws.String(pin), ExpressionAttributeValues: values,
		})
		rec.Steps = it.steps
	} else {
		_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.cfg.table, Item: c.item(), ConditionExpression: aws.String(pin), ExpressionAttributeValues: values,
		})
	}
	if err != nil {
		if failed, _ := conditionFailed(err); failed {
			return store.Record{}, false, nil
		}
		return store.Record{}, false, mapError(ctx, op, err)
	}
	return rec, true, nil
}

// Extend implements [store.Store]: one UpdateItem conditioned on the claim
// being held and live by the client's clock, and on its expireAt being no
// later than the new lease's. An item kept longer (its steps' keep, a
// lease shortened) refuses it and gets a second UpdateItem that moves the
// lease alone, so that Extend never shortens a keep (DynamoDB has no max
// to write in one).
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence), engine.ValidateTTL(op, ttl)); err != nil {
		return time.Time{}, false, err
	}
	now := s.now()
	expires := sat(now, ttl.Milliseconds())
	ok, err := s.raise(ctx, op, key, fence, &dynamodb.UpdateItemInput{
		TableName:        &s.cfg.table,
		Key:              s.pk(key),
		UpdateExpression: aws.String("SET ex = :ex"),
		ExpressionAttributeValues: s.values(now, map[string]types.AttributeValue{
			":fence": num(int64(fence)), ":ex": num(expires),
		}, condHeld),
	}, condHeld, expireAt(expires, fence, true, s.cfg.step, s.cfg.skew), "")
	if !ok || err != nil {
		return time.Time{}, false, err
	}
	return time.UnixMilli(expires), true, nil
}

// raise makes the conditional update in of key's item, whose condition
// is cond (which requires the claim of fence), and raises the item's
// expireAt to until (s) in the same write when it is no later: in's
// UpdateExpression (a SET) with expireAt = until, under cond and expireAt
// <= until. When that is refused by an item that may have met cond with a
// later expireAt (the claim's item, sent back with the refusal; or any, on
// an endpoint that sends none), in is sent as it is under cond and
// expireAt > until: no write ever lowers an expireAt, and at most one of
// the two lands, since a claim's expireAt only grows. ok = false when cond
// failed, unless wid is not "" (in sets wid = :wid) and the item that
// refused carries the claim with that write id: the SDK retried a write
// whose answer was lost, and the write landed.
func (s *Store) raise(ctx context.Context, op, key string, fence idemkit.Fence, in *dynamodb.UpdateItemInput, cond string, until int64, wid string) (bool, error) {
	own := func(it *item) bool {
		return wid != "" && it != nil && it.state == store.StateClaimed && it.fence == fence && it.writeID == wid
	}
	set := *in.UpdateExpression
	in.ExpressionAttributeValues[":expireAt"] = num(until)
	in.UpdateExpression = aws.String(set + ", expireAt = :expireAt")
	in.ConditionExpression = aws.String(cond + " AND expireAt <= :expireAt")
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err := s.client.UpdateItem(ctx, in)
	if err == nil {
		return true, nil
	}
	failed, sent := conditionFailed(err)
	if !failed {
		return false, mapError(ctx, op, err)
	}
	if len(sent) > 0 {
		it, err := decode(op, key, sent)
		if err != nil || own(it) {
			return err == nil, err
		}
		if it.state != store.StateClaimed || it.fence != fence || it.expireAt <= until {
			return false, nil // cond failed
		}
	}
	in.UpdateExpression = aws.String(set)
	in.ConditionExpression = aws.String(cond + " AND expireAt > :expireAt")
	if wid == "" {
		in.ReturnValuesOnConditionCheckFailure = ""
	}
	if _, err = s.client.UpdateItem(ctx, in); err == nil {
		return true, nil
	}
	if failed, sent = conditionFailed(err); !failed {
		return false, mapError(ctx, op, err)
	}
	if wid == "" {
		return false, nil
	}
	it, err := s.refused(ctx, op, key, sent)
	return err == nil && own(it), err
}

// Complete implements [store.Store]: one PutItem of the outcome
// conditioned on the item still carrying the claim. A refusal by an item
// that holds this call's outcome (its write id: the SDK retried a PutItem
// whose first answer was lost) is a success.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.Ready(ctx, op, engine.ValidateComplete(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	c := s.outcome(rec, ttl, s.now())
	c.writeID = newWriteID()
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.cfg.table,
		Item:                                c.item(),
		ConditionExpression:                 aws.String("fe = :fence AND st = :claimed"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":fence": num(int64(rec.Fence)), ":claimed": num(int64(store.StateClaimed))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return true, nil
	}
	failed, sent := conditionFailed(err)
	if !failed {
		return false, mapError(ctx, op, err)
	}
	it, err := s.refused(ctx, op, rec.Key, sent)
	if err != nil {
		return false, err
	}
	return it != nil && it.writeID == c.writeID, nil
}

// outcome is the item of rec, living ttl from now (ms).
func (s *Store) outcome(rec store.Record, ttl time.Duration, now int64) *contents {
	expires := sat(now, ttl.Milliseconds())
	return &contents{
		key: rec.Key, fp: rec.Fingerprint, state: rec.State, fence: rec.Fence, expires: expires, created: now,
		response: rec.Response, expireAt: expireAt(expires, rec.Fence, false, s.cfg.step, s.cfg.skew),
	}
}

// checkFingerprint refuses a fingerprint a claim's item cannot hold with
// its steps.
func (s *Store) checkFingerprint(op, key, fp string) error {
	if maxResponse(key, fp) < stepsBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("a %d-byte fingerprint does not fit a record item beside its steps", len(fp)), nil)
	}
	return nil
}

// checkOutcome refuses, before any I/O, an outcome whose fence or response
// a record item cannot hold.
func (s *Store) checkOutcome(op string, rec store.Record) error {
	if rec.Fence > idemkit.FenceMax {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %s exceeds the maximum %s", rec.Fence, idemkit.FenceMax), nil)
	}
	if limit := min(s.cfg.maxResponse, maxResponse(rec.Key, rec.Fingerprint)); len(rec.Response) > limit {
		return engine.TooLarge(op, len(rec.Response), max(limit, 0))
	}
	return nil
}

// released is the update that turns a claim into a tombstone: invisible
// and claimable, with its fence, and its fingerprint and steps (if any)
// for the next claim. tombstone turns a record into a tombstone of its
// fence alone. Either keeps expireAt: every record's is past its fence
// floor already, and a claim's past its steps' keep.
const (
	releasedClaim = "SET st = :released, ex = :now REMOVE rs, ca, lockId, wid"
	tombstone     = "SET st = :released, ex = :now REMOVE fp, rs, ca, lockId, wid, sp, sc"
)

// Release implements [store.Store]: one UpdateItem that leaves a
// tombstone, conditioned on the claim being held and live. The tombstone
// keeps the claim's fingerprint and steps.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence)); err != nil {
		return false, err
	}
	now := s.now()
	return s.update(ctx, op, &dynamodb.UpdateItemInput{
		TableName:                 &s.cfg.table,
		Key:                       s.pk(key),
		UpdateExpression:          aws.String(releasedClaim),
		ConditionExpression:       aws.String(condHeld),
		ExpressionAttributeValues: s.values(now, map[string]types.AttributeValue{":fence": num(int64(fence))}, releasedClaim, condHeld),
	})
}

// update makes a conditional update: ok = false when its condition failed.
func (s *Store) update(ctx context.Context, op string, in *dynamodb.UpdateItemInput) (bool, error) {
	if _, err := s.client.UpdateItem(ctx, in); err != nil {
		if failed, _ := conditionFailed(err); failed {
			return false, nil
		}
		return false, mapError(ctx, op, err)
	}
	return true, nil
}

// Get implements [store.Store] and [store.Records]: one strongly
// consistent GetItem. An item past its expiry that DynamoDB has not
// deleted yet is not live.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return store.Record{}, false, err
	}
	it, err := s.read(ctx, op, key)
	if err != nil || it == nil || !it.live(s.now(), s.cfg.skew.Milliseconds()) {
		return store.Record{}, false, err
	}
	return it.record(), true, nil
}

// Delete implements [store.Store] and [store.Records]: one UpdateItem
// that leaves a tombstone of the fence alone (as [Store.Release] does,
// without the fingerprint and steps), so later fences stay greater,
// conditioned on a live record being there or the item carrying steps (sc:
// a tombstone a release left them on, or a claim whose lease ran out,
// which is ended with them, as a Delete ends it on memstore and
// redisstore). The tombstone keeps fe and expireAt, all the fence and
// expiry rules need. The item's old st and ex, sent back (UPDATED_OLD),
// tell whether it was live, judged by the same clock as the condition;
// a key with nothing live and no steps costs the refused write alone.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return false, err
	}
	now := s.now()
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.cfg.table,
		Key:                       s.pk(key),
		UpdateExpression:          aws.String(tombstone),
		ConditionExpression:       aws.String(condDeletable),
		ExpressionAttributeValues: s.values(now, nil, tombstone, condDeletable),
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if err != nil {
		if failed, _ := conditionFailed(err); failed {
			return false, nil
		}
		return false, mapError(ctx, op, err)
	}
	// st and ex are SET, so sent back; one missing can only be a state
	// the write did not change (a tombstone's), which is not live.
	st, okState := number(out.Attributes[attrState])
	ex, okExpires := number(out.Attributes[attrExpires])
	old := item{state: store.State(st), expires: ex}
	return okState && okExpires && old.live(now, s.cfg.skew.Milliseconds()), nil
}

// Put implements [store.Records]: one PutItem of the whole record, unless
// the live record there carries a higher fence. Put's fences are a lock's;
// do not mix Put and [Store.Claim] on one key.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := engine.Ready(ctx, op, validatePut(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	now := s.now()
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 &s.cfg.table,
		Item:                      s.outcome(rec, ttl, now).item(),
		ConditionExpression:       aws.String(condPut),
		ExpressionAttributeValues: s.values(now, map[string]types.AttributeValue{":fence": num(int64(rec.Fence))}, condPut),
	})
	if err != nil {
		if failed, _ := conditionFailed(err); failed {
			return false, nil
		}
		return false, mapError(ctx, op, err)
	}
	return true, nil
}

// validatePut checks a Put's arguments; its fence may be zero (an
// unfenced writer).
func validatePut(rec store.Record, ttl time.Duration) error {
	if err := engine.ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", fmt.Sprintf("a record needs an outcome state (completed or not-replayable, got %v)", rec.State), nil)
	}
	return engine.ValidateTTL("put", ttl)
}
