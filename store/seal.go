package store

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// SealKey is one key of [Seal]: an AES key and the id that names it in
// every response it seals.
type SealKey struct {
	// ID names the key in the records it seals, so that the right key
	// opens them after a rotation: 1 to 64 printable ASCII characters
	// without spaces (letters, digits, punctuation), unique among the keys
	// given to Seal, for example "2025-q4". It is stored in plain text in
	// every sealed record.
	ID string

	// Secret is the AES key: 16, 24 or 32 random bytes (AES-128, AES-192
	// or AES-256), not all zero. Seal keeps no reference to it.
	Secret []byte
}

// ErrUnsealable is matched (errors.Is) by a Claim or Get that found a
// record Seal cannot trust: an outcome whose envelope was sealed with a key
// id that is not among the keys given, altered or moved from another
// record, or not sealed at all; one whose state or fence was changed on
// the backend since it was sealed; or (Claim) an outcome made to look
// expired on the backend that Seal could not restore. The error's code is
// Internal, and its message says which of these it is, naming the key id
// (never the record key or any key material).
var ErrUnsealable = errors.New("store: the recorded response cannot be opened")

// maxSealKeyID is the longest key id Seal accepts.
const maxSealKeyID = 64

// sealMagic starts every envelope: three marker bytes (the first outside
// ASCII, so that no text response starts with them) and the envelope's
// version.
const sealMagic = "\x89IKS\x01"

// sealFields is the size of the record fields an envelope carries after
// its key id: the state (1 byte), the fence and the lifetime in
// milliseconds (8 bytes each, big-endian).
const sealFields = 1 + 8 + 8

// Seal returns a [Store] that seals every outcome it writes to s with
// AES-GCM under current, and opens the outcomes it reads with any of the
// keys given (current and older): the recorded responses (card numbers,
// e-mail addresses, tokens) never sit in plain text on the backend, and
// every field of a record that decides what the guard does is
// authenticated. It works on every store, the composed one included.
// docs/security.md explains what it protects against, and what not.
//
// Every outcome Complete writes, completed or not replayable, with a
// response or none, becomes an envelope in the record's response: after a
// marker and version ("\x89IKS" and 1) and the key id behind its length,
// the outcome's state, fence and lifetime (sealFields), a fresh random
// 96-bit nonce, and the ciphertext with its tag, authenticated together
// with the record key and the fingerprint. The lifetime runs from the
// fence: the record TTL given to Complete plus the time from the claim (as
// its Claim answered) to Complete, timed by this process's monotonic clock
// (a claim it did not grant, or one of more than 16,384 it holds at once,
// counts no time). Record keys, the fingerprint (a hash already), state,
// fence and times stay readable for operators. An envelope adds 51 bytes
// plus the key id's length: a response within that margin of a backend's
// limit fails Complete with [ErrTooLarge], and the guard records it as
// executed but not replayable.
//
// Claim (when it returns an outcome) and Get open the envelope and check
// it against the record. An envelope under a key id not given, one that
// fails authentication (altered, moved, sealed under another secret), an
// outcome without an envelope, and an outcome whose state or fence differs
// from the envelope's fail with an Internal error matching
// [ErrUnsealable], returning no record: the guard, which cannot tell
// whether its work ran, answers unavailable and does not run it. Extend,
// Release and Delete pass through: an operator can still delete a record
// that no longer opens.
//
// An outcome made to look free on the backend (its expiry moved into the
// past, its state changed to a run-out claim or a tombstone) is taken over
// by the store's Claim, which reports the response it replaced
// ([Record].Replaced). When that envelope's fence, read as Unix
// milliseconds, plus its lifetime is still ahead of the new claim's
// CreatedAt (a fence is the backend's clock at its claim), Seal completes
// the new claim with the authentic outcome, sealed again under the new
// fence for the rest of its lifetime, and returns it as Claim's answer
// (claimed = false), so a retry replays it; should that fail, it releases
// the claim and fails with [ErrUnsealable]. A fence pushed ahead of the
// clock only makes Seal restore an outcome that had just expired. A replay
// stays one round trip and a first execution two.
//
// Rotation: give the new key as an older key on every node first, then
// make it current (and the old one older) everywhere; drop the old key
// once the record TTL has passed since the last outcome it sealed. A key
// may seal at most 2^32 outcomes (the bound of random nonces): rotate
// well before that.
//
// Seal returns an InvalidArgument error for a nil store or a bad key,
// never containing key material. When s is a [Watcher], so is the sealed
// store; when s is a [Transactor], its work commits sealed outcomes; when
// s is a [Stepper], so is the sealed store, and it seals each step's
// result as it seals a response (its envelope, about 60 bytes, counts
// against [MaxStepBytes] on the backend).
func Seal(s Store, current SealKey, older ...SealKey) (Store, error) {
	if s == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "seal", "store must not be nil", nil)
	}
	ss := &sealed{next: s, keys: make(map[string]cipher.AEAD, 1+len(older)), now: time.Now, granted: make(map[grantedClaim]time.Time)}
	for i, k := range append([]SealKey{current}, older...) {
		name := "the current key"
		if i > 0 {
			name = fmt.Sprintf("older key %d", i)
		}
		aead, err := sealCipher(name, k, ss.keys)
		if err != nil {
			return nil, err
		}
		ss.keys[k.ID] = aead
	}
	ss.header = append([]byte(sealMagic), byte(len(current.ID)))
	ss.header = append(ss.header, current.ID...)
	ss.current = ss.keys[current.ID]
	w, watches := s.(Watcher)
	st, steps := s.(Stepper)
	switch {
	case watches && steps:
		return &struct {
			*watchingSealed
			sealedSteps
		}{&watchingSealed{sealed: ss, watcher: w}, sealedSteps{ss, st}}, nil
	case watches:
		return &watchingSealed{sealed: ss, watcher: w}, nil
	case steps:
		return &struct {
			*sealed
			sealedSteps
		}{ss, sealedSteps{ss, st}}, nil
	}
	return ss, nil
}

// sealer is every Store Seal returns (a *sealed, alone or with the
// wrapped store's capabilities).
type sealer interface{ sealedStore() *sealed }

func (s *sealed) sealedStore() *sealed { return s }

// sealedSteps is the [Stepper] of a sealed store over one: each step's
// result is sealed like a response, bound to the record key, the step's
// index and its name.
type sealedSteps struct {
	s  *sealed
	st Stepper
}

// RecordStep implements [Stepper] with the step's result sealed.
func (r sealedSteps) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step Step, keep time.Duration) (bool, error) {
	step.Result = r.s.sealStep(key, index, step)
	return r.st.RecordStep(ctx, key, fence, index, step, keep)
}

// watchingSealed is the Store Seal returns for a store that notifies: a
// [Watcher] through it (notifications carry no response).
type watchingSealed struct {
	*sealed
	watcher Watcher
}

// Watch implements [Watcher] with the sealed store's watch.
func (s *watchingSealed) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return s.watcher.Watch(ctx, key)
}

// sealCipher validates k, named name in messages, against the keys already
// taken, and returns its AEAD.
func sealCipher(name string, k SealKey, taken map[string]cipher.AEAD) (cipher.AEAD, error) {
	bad := func(detail string) error {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "seal", name+": "+detail, nil)
	}
	if !validSealKeyID(k.ID) {
		return nil, bad(fmt.Sprintf("key id must be 1 to %d printable ASCII characters without spaces (got %d bytes)", maxSealKeyID, len(k.ID)))
	}
	if _, dup := taken[k.ID]; dup {
		return nil, bad(fmt.Sprintf("key id %q is given twice", k.ID))
	}
	switch len(k.Secret) {
	case 16, 24, 32:
	default:
		return nil, bad(fmt.Sprintf("secret of key id %q has %d bytes; want 16, 24 or 32 (AES-128, AES-192 or AES-256)", k.ID, len(k.Secret)))
	}
	zero := true
	for _, b := range k.Secret {
		zero = zero && b == 0
	}
	if zero {
		return nil, bad(fmt.Sprintf("secret of key id %q is all zero bytes; want random bytes", k.ID))
	}
	block, err := aes.NewCipher(k.Secret)
	if err != nil {
		return nil, bad(fmt.Sprintf("secret of key id %q is not an AES key", k.ID))
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, bad(fmt.Sprintf("secret of key id %q cannot be used with GCM", k.ID))
	}
	return aead, nil
}

// validSealKeyID reports whether id is 1 to maxSealKeyID bytes of
// printable ASCII without spaces.
func validSealKeyID(id string) bool {
	if id == "" || len(id) > maxSealKeyID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// sealed is the Store Seal returns.
type sealed struct {
	next    Store
	keys    map[string]cipher.AEAD // by key id; read-only after Seal
	current cipher.AEAD
	header  []byte // the envelope's start under the current key: magic, version, id length, id

	// now is the local clock that times claims (time.Now, monotonic).
	now func() time.Time

	mu sync.Mutex
	// granted holds when (by now) each claim this store handed out was
	// granted, until it is completed or released: the time from a claim to
	// its completion lengthens the outcome's sealed lifetime (see Seal).
	// It is bounded by maxGranted; a claim it forgot seals the record TTL
	// alone.
	granted map[grantedClaim]time.Time
}

// grantedClaim names a claim: its record key and fence.
type grantedClaim struct {
	key   string
	fence idemkit.Fence
}

// maxGranted bounds the claims a sealed store times at once; past it, it
// forgets an arbitrary one.
const maxGranted = 1 << 14

// grant notes that the claim (key, fence) was granted now.
func (s *sealed) grant(key string, fence idemkit.Fence) {
	t := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.granted) >= maxGranted {
		for c := range s.granted {
			delete(s.granted, c)
			break
		}
	}
	s.granted[grantedClaim{key, fence}] = t
}

// held returns how long ago the claim (key, fence) was granted, 0 when
// the store does not know.
func (s *sealed) held(key string, fence idemkit.Fence) time.Duration {
	s.mu.Lock()
	t, ok := s.granted[grantedClaim{key, fence}]
	s.mu.Unlock()
	if !ok {
		return 0
	}
	return max(s.now().Sub(t), 0)
}

// ended forgets the claim (key, fence).
func (s *sealed) ended(key string, fence idemkit.Fence) {
	s.mu.Lock()
	delete(s.granted, grantedClaim{key, fence})
	s.mu.Unlock()
}

func (s *sealed) Claim(ctx context.Context, key, fp string, ttl time.Duration) (Record, bool, error) {
	const op = "claim"
	rec, claimed, err := s.next.Claim(ctx, key, fp, ttl)
	if err != nil {
		return rec, claimed, err
	}
	if !claimed {
		if rec, err = s.open(op, key, rec); err != nil {
			return Record{}, false, err
		}
		return rec, false, nil
	}
	replaced := rec.Replaced
	rec.Replaced = nil
	opened, err := s.openSteps(op, key, rec)
	if err != nil {
		// Steps that do not open are like a response that does not: the
		// key stays taken until they expire or an operator deletes it.
		_, _ = s.next.Release(ctx, key, rec.Fence)
		return Record{}, false, err
	}
	rec = opened
	if replaced == nil {
		s.grant(key, rec.Fence)
		return rec, true, nil
	}
	// The claim took over a record that still held a response. An
	// envelope that does not open (not sealed, under a key no longer
	// given, or altered) is like an erased one: nothing tells it from an
	// expired record, and it is not reported. One that opens tells when
	// its outcome expires.
	env, err := s.openEnvelope(op, key, replaced.Fingerprint, replaced.Response)
	if err != nil {
		s.grant(key, rec.Fence)
		return rec, true, nil
	}
	rest := env.expiresAt.Sub(rec.CreatedAt).Truncate(time.Millisecond)
	if rest < time.Millisecond {
		// It expired: the claim is the caller's, and reports the
		// response it replaced, opened.
		if len(env.plain) > 0 {
			rec.Replaced = &Record{Fingerprint: replaced.Fingerprint, Response: env.plain}
		}
		s.grant(key, rec.Fence)
		return rec, true, nil
	}
	return s.restore(ctx, rec, replaced.Fingerprint, env, rest)
}

// restore completes the claim c, which took over the outcome env of the
// fingerprint fp while it was live for rest more, with that outcome for
// rest, and returns it as a replay. Should it fail, it releases c and
// fails with ErrUnsealable.
func (s *sealed) restore(ctx context.Context, c Record, fp string, env envelope, rest time.Duration) (Record, bool, error) {
	const op = "claim"
	out := Record{Key: c.Key, Fingerprint: fp, State: env.state, Fence: c.Fence}
	out.Response = s.seal(out, rest, 0, env.plain)
	ok, err := s.next.Complete(ctx, out, rest)
	if err != nil || !ok {
		detail := "the claim was ended meanwhile"
		if err != nil {
			detail = err.Error()
		}
		// The claim must not stay behind a request the caller will not
		// run: release it, even once ctx has ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sealReleaseTimeout)
		_, _ = s.next.Release(rctx, c.Key, c.Fence)
		cancel()
		return Record{}, false, idemkit.NewError(idemkit.CodeInternal, op,
			"the record's outcome was made to look expired on the backend (its state or expiry changed), and restoring it failed: "+detail, ErrUnsealable)
	}
	out.Response = env.response()
	out.CreatedAt, out.ExpiresAt = c.CreatedAt, c.CreatedAt.Add(rest)
	return out, false, nil
}

// sealReleaseTimeout bounds the release of a claim whose restoration
// failed.
const sealReleaseTimeout = 5 * time.Second

func (s *sealed) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	return s.next.Extend(ctx, key, fence, ttl)
}

func (s *sealed) Complete(ctx context.Context, rec Record, ttl time.Duration) (bool, error) {
	if refused(ctx, rec, ttl) {
		return s.next.Complete(ctx, rec, ttl) // refused there, with its error
	}
	rec.Response = s.seal(rec, ttl, s.held(rec.Key, rec.Fence), rec.Response)
	ok, err := s.next.Complete(ctx, rec, ttl)
	if err == nil {
		s.ended(rec.Key, rec.Fence) // written, or the claim is gone
	}
	return ok, err
}

// refused reports whether the store under Seal refuses a completion of rec
// for ttl before any I/O (no outcome state, a zero fence or key, a TTL
// under a millisecond, an ended ctx): then nothing is sealed, and the
// store's own refusal is the answer.
func refused(ctx context.Context, rec Record, ttl time.Duration) bool {
	return !rec.State.Done() || rec.Fence == 0 || rec.Key == "" || ttl < time.Millisecond || ctx.Err() != nil
}

// Work implements [Transactor]: the work of the sealed store, whose
// commit seals the outcome as Complete does (a nil Work when the sealed
// store is no Transactor).
func (s *sealed) Work(ctx context.Context, key string, fence idemkit.Fence) (context.Context, Work) {
	t, ok := s.next.(Transactor)
	if !ok {
		return ctx, nil
	}
	ctx, w := t.Work(ctx, key, fence)
	if w == nil {
		return ctx, nil
	}
	return ctx, &sealedWork{Work: w, s: s}
}

// sealedWork is the work of a sealed store.
type sealedWork struct {
	Work
	s *sealed
}

func (w *sealedWork) Commit(ctx context.Context, rec Record, ttl time.Duration) (bool, error) {
	if refused(ctx, rec, ttl) {
		return w.Work.Commit(ctx, rec, ttl)
	}
	rec.Response = w.s.seal(rec, ttl, w.s.held(rec.Key, rec.Fence), rec.Response)
	ok, err := w.Work.Commit(ctx, rec, ttl)
	if err == nil {
		w.s.ended(rec.Key, rec.Fence)
	}
	return ok, err
}

func (s *sealed) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	ok, err := s.next.Release(ctx, key, fence)
	if err == nil {
		s.ended(key, fence)
	}
	return ok, err
}

func (s *sealed) Get(ctx context.Context, key string) (Record, bool, error) {
	rec, ok, err := s.next.Get(ctx, key)
	if err != nil || !ok {
		return rec, ok, err
	}
	if rec, err = s.open("get", key, rec); err != nil {
		return Record{}, false, err
	}
	return rec, true, nil
}

func (s *sealed) Delete(ctx context.Context, key string) (bool, error) {
	return s.next.Delete(ctx, key)
}

// seal returns the envelope of response under the current key for the
// outcome rec (its key, fingerprint, state and fence) kept for ttl, whose
// claim was granted held before (as far as this store knows).
func (s *sealed) seal(rec Record, ttl, held time.Duration, response []byte) []byte {
	header := make([]byte, len(s.header), len(s.header)+sealFields+s.current.Overhead()+len(response))
	copy(header, s.header)
	header = append(header, byte(rec.State))
	header = binary.BigEndian.AppendUint64(header, uint64(rec.Fence))
	header = binary.BigEndian.AppendUint64(header, uint64((held + ttl).Milliseconds()))
	return s.current.Seal(header, nil, response, sealAAD(header, rec.Key, rec.Fingerprint))
}

// envelope is an opened envelope.
type envelope struct {
	state     State
	fence     idemkit.Fence
	expiresAt time.Time // the fence read as Unix milliseconds, plus the sealed lifetime: never after the outcome's expiry
	plain     []byte
}

// response returns the outcome's response: its plain text, which for a
// completed outcome is empty, not nil, when it is empty.
func (e envelope) response() []byte {
	if len(e.plain) == 0 {
		if e.state == StateCompleted {
			return []byte{}
		}
		return nil
	}
	return e.plain
}

// open returns rec with its outcome opened and checked against the
// envelope; key is the record key the caller asked for. A claim is
// returned without a response (a claim has none; one written over an
// outcome on the backend may still hold its envelope).
func (s *sealed) open(op, key string, rec Record) (Record, error) {
	if !rec.State.Done() {
		rec.Response = nil
		return s.openSteps(op, key, rec)
	}
	env, err := s.openEnvelope(op, key, rec.Fingerprint, rec.Response)
	if err != nil {
		return Record{}, err
	}
	if env.state != rec.State || env.fence != rec.Fence {
		return Record{}, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf(
			"the record's state or fence was changed on the backend after its outcome was sealed (sealed: %v under fence %d; found: %v under fence %d)",
			env.state, env.fence, rec.State, rec.Fence), ErrUnsealable)
	}
	rec.Response = env.response()
	return rec, nil
}

// openEnvelope opens the envelope env of the record key and fingerprint
// fp. Its errors match ErrUnsealable and never name the record key.
func (s *sealed) openEnvelope(op, key, fp string, env []byte) (envelope, error) {
	return s.openSealed(op, key, fp, env, false)
}

// openSealed opens the envelope env of an outcome (step false) or of a
// step's result (bound to binding where an outcome is to its
// fingerprint).
func (s *sealed) openSealed(op, key, fp string, env []byte, step bool) (envelope, error) {
	fail := func(detail string) (envelope, error) {
		return envelope{}, idemkit.NewError(idemkit.CodeInternal, op, detail, ErrUnsealable)
	}
	if len(env) < len(sealMagic) || string(env[:len(sealMagic)-1]) != sealMagic[:len(sealMagic)-1] {
		return fail("the record's outcome is not sealed (written before sealing was turned on, by a store without it, or its envelope was erased); " +
			"it is not replayed, and the key stays taken until the record expires or an operator deletes it")
	}
	if env[len(sealMagic)-1] != sealMagic[len(sealMagic)-1] {
		return fail(fmt.Sprintf("the record's outcome is sealed in envelope version %d, which this version of the store cannot read", env[len(sealMagic)-1]))
	}
	rest := env[len(sealMagic):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0])+sealFields+s.current.Overhead() {
		return fail("the record's sealed outcome is truncated")
	}
	id := string(rest[1 : 1+int(rest[0])])
	fields := rest[1+len(id):]
	state := State(fields[0])
	if !validSealKeyID(id) || (step && state != stepState) || (!step && !state.Done()) {
		return fail("the record's sealed outcome is malformed (its key id or state is not a valid one)")
	}
	aead := s.keys[id]
	if aead == nil {
		return fail(fmt.Sprintf("record sealed with key id %q, which is not among the keys given: add it back to the older keys until its records expire", id))
	}
	header := env[:len(sealMagic)+1+len(id)+sealFields]
	plain, err := aead.Open(nil, nil, env[len(header):], sealAAD(header, key, fp))
	if err != nil {
		return fail(fmt.Sprintf("record sealed with key id %q failed authentication: its outcome was altered, moved from another key or request, "+
			"or sealed under another secret with the same key id", id))
	}
	// Both were written by Seal (authenticated): a fence within
	// idemkit.FenceMax and a lifetime that was a time.Duration.
	fence := idemkit.Fence(binary.BigEndian.Uint64(fields[1:9]))
	life := time.Duration(binary.BigEndian.Uint64(fields[9:17])) * time.Millisecond
	return envelope{state: state, fence: fence, expiresAt: time.UnixMilli(int64(fence)).Add(life), plain: plain}, nil
}

// stepState marks the envelope of a step's result where an outcome's
// carries its state.
const stepState = 0

// sealStep returns the envelope of the result of step number index of the
// claim of key: an outcome's layout with state 0, fence 0 and lifetime 0,
// authenticated with the key and, where an outcome has its fingerprint,
// the step's index and name.
func (s *sealed) sealStep(key string, index int, step Step) []byte {
	header := make([]byte, len(s.header), len(s.header)+sealFields+s.current.Overhead()+len(step.Result))
	copy(header, s.header)
	header = append(header, stepState)
	header = append(header, make([]byte, 16)...)
	return s.current.Seal(header, nil, step.Result, sealAAD(header, key, stepBinding(index, step.Name)))
}

// stepBinding is what a step's envelope is bound to besides its key.
func stepBinding(index int, name string) string { return fmt.Sprintf("step %d %s", index, name) }

// openSteps returns the claim rec with its steps' results opened: a copy
// of its steps. Its errors match ErrUnsealable and never name the key.
func (s *sealed) openSteps(op, key string, rec Record) (Record, error) {
	if len(rec.Steps) == 0 {
		return rec, nil
	}
	steps := make([]Step, len(rec.Steps))
	for i, st := range rec.Steps {
		plain, err := s.openSealed(op, key, stepBinding(i, st.Name), st.Result, true)
		if err != nil {
			return Record{}, err
		}
		steps[i] = Step{Name: st.Name, Result: plain.plain}
	}
	rec.Steps = steps
	return rec, nil
}

// sealAAD returns the additional authenticated data of an envelope: its
// header (up to the nonce), then the record key and the fingerprint, each
// behind its length.
func sealAAD(header []byte, key, fp string) []byte {
	aad := make([]byte, 0, len(header)+8+len(key)+len(fp))
	aad = append(aad, header...)
	aad = binary.BigEndian.AppendUint32(aad, uint32(len(key)))
	aad = append(aad, key...)
	aad = binary.BigEndian.AppendUint32(aad, uint32(len(fp)))
	return append(aad, fp...)
}
