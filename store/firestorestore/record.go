package firestorestore

import (
	"crypto/rand"
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// The fields of a record document (docs/backends.md, "Firestore").
const (
	fieldKey         = "key"         // the record key: a string, or bytes when it is not valid UTF-8
	fieldFingerprint = "fingerprint" // the request's fingerprint: a string, or bytes when it is not valid UTF-8
	fieldState       = "state"       // 0 released or deleted, 1 claimed, 2 completed, 3 not replayable
	fieldResponse    = "response"    // the encoded response (bytes)
	fieldFence       = "fence"       // the fence of the claim (an integer)
	fieldCreatedAt   = "createdAt"   // when an extended claim was made (its commit time); absent: the document's update time
	fieldTTL         = "ttlMicros"   // the lifetime from the document's update time, in microseconds (an integer)
	fieldWriteID     = "writeId"     // a random id of the write that last changed the document
	fieldExpireAt    = "expireAt"    // when the document may be deleted (by Firestore's clock): the TTL-policy field, which Sweep queries
	fieldHeldUntil   = "heldUntil"   // only on an extended claim: the expiry the extension moved; an extension committed at or after it is void
	fieldLockID      = "lockId"      // only on a claim whose fingerprint is a lock id: the fingerprint again, the field FindClaim queries
	fieldSteps       = "steps"       // only on a claim with steps, or the tombstone its release left: a map of step index ("0", "1", ...) to {name, result}
	fieldLeaseUntil  = "leaseUntil"  // only on a claim whose last write recorded a step: when its lease runs out (a step's commit does not move it)
)

// The fields of a step, in the map under its index in fieldSteps.
const (
	stepName   = "name"   // a string
	stepResult = "result" // bytes
)

// released is the state of a tombstone: what a release or delete leaves,
// its fence alone, invisible and claimable.
const released store.State = 0

const writeIDLen = 22 // 16 random bytes in unpadded base64url

// expireSlack pads the expireAt of claims and outcomes ([lifetimeEnd]).
const expireSlack = time.Second

func newWriteID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// doc is a record document as read, with the times of its snapshot.
type doc struct {
	exists      bool
	key, fp     string
	state       store.State
	response    []byte
	fence       idemkit.Fence
	createdAt   time.Time
	heldUntil   time.Time // see fieldHeldUntil; zero when absent
	leaseUntil  time.Time // see fieldLeaseUntil; zero when absent
	ttl         time.Duration
	writeID     string
	steps       []store.Step // see fieldSteps; nil when absent
	expireAt    time.Time    // the fieldExpireAt: when the document may go
	updateTime  time.Time    // the document's update time: its last write's commit time, and the precondition of the next write
	readTime    time.Time    // Firestore's clock when it was read
	readLocally time.Time    // the local (monotonic) clock when the read was sent
}

// expiresAt is when the record's lease or lifetime runs out, from the
// commit time of the document's last write, unless that was an extension
// committed once the lease it moved had run out: such an extension is
// void, so that one sent blind cannot take back a claim judged free. A
// step's write keeps the lease as it was (leaseUntil).
func (d *doc) expiresAt() time.Time {
	if !d.leaseUntil.IsZero() {
		return d.leaseUntil
	}
	if !d.heldUntil.IsZero() && !d.updateTime.Before(d.heldUntil) {
		return d.heldUntil
	}
	return d.updateTime.Add(d.ttl)
}

// live reports whether the document holds a claim or outcome that has not
// run out at its read time.
func (d *doc) live() bool {
	return d.exists && d.state.Valid() && d.readTime.Before(d.expiresAt())
}

// holds reports whether the document still carries the claim fence, live
// or run out.
func (d *doc) holds(fence idemkit.Fence) bool {
	return d.exists && d.state == store.StateClaimed && d.fence == fence
}

// wrote reports whether the document carries one of the write ids ids and
// the state of such a write.
func (d *doc) wrote(ids []string, state func(store.State) bool) bool {
	return d.exists && state(d.state) && slices.Contains(ids, d.writeID)
}

// record is the record the document holds, with a copy of a claim's
// steps (the document may be a listener's, shared).
func (d *doc) record() store.Record {
	rec := store.Record{
		Key: d.key, Fingerprint: d.fp, State: d.state, Fence: d.fence,
		CreatedAt: d.createdAt, ExpiresAt: d.expiresAt(),
	}
	if len(d.response) > 0 {
		rec.Response = d.response
	}
	if d.state == store.StateClaimed {
		rec.Steps = cloneSteps(d.steps)
	}
	return rec
}

// carries reports whether a claim of fp that takes over the document,
// not live at its read time, carries its steps: the document keeps steps
// ([doc.keepsSteps]) of fp.
func (d *doc) carries(fp string) bool { return d.keepsSteps() && d.fp == fp }

// keepsSteps reports whether the document, not live at its read time,
// keeps steps for a next claim: it is a claim whose lease ran out or a
// release's tombstone, with steps, and not yet past its expireAt (past
// it, Firestore may delete it any time).
func (d *doc) keepsSteps() bool {
	return d.exists && (d.state == store.StateClaimed || d.state == released) &&
		len(d.steps) > 0 && d.readTime.Before(d.expireAt)
}

// cloneSteps returns a copy of steps that shares no memory with it.
func cloneSteps(steps []store.Step) []store.Step {
	if len(steps) == 0 {
		return nil
	}
	c := make([]store.Step, len(steps))
	for i, s := range steps {
		c[i] = store.Step{Name: s.Name, Result: slices.Clone(s.Result)}
	}
	return c
}

// now bounds Firestore's clock from above, as [known.now] does.
func (d *doc) now() time.Time { return d.readTime.Add(time.Since(d.readLocally)) }

// keepUntil returns when the record document snap may go ([keepRecord];
// a void extension counts, which only keeps it longer), or ok = false.
func keepUntil(snap *firestore.DocumentSnapshot, step time.Duration) (until time.Time, ok bool) {
	m := snap.Data()
	state, ok1 := m[fieldState].(int64)
	fence, ok2 := m[fieldFence].(int64)
	ttl, ok3 := m[fieldTTL].(int64)
	if !ok1 || !ok2 || !ok3 || state < 0 || state > int64(store.StateNotReplayable) || fence < 0 || ttl < 0 || ttl > maxTTLMicros {
		return time.Time{}, false
	}
	rec := store.Record{State: store.State(state), Fence: idemkit.Fence(fence), ExpiresAt: snap.UpdateTime.Add(time.Duration(ttl) * time.Microsecond)}
	if lease, ok := m[fieldLeaseUntil].(time.Time); ok {
		rec.ExpiresAt = lease
	}
	return keepRecord(rec, step), true
}

// keepRecord is [store.Store]'s rule for when rec may go, with the
// largest clock step step.
func keepRecord(rec store.Record, step time.Duration) time.Time {
	until := rec.ExpiresAt
	if rec.State == store.StateClaimed {
		until = until.Add(store.ClaimRetention)
	}
	return later(until, fenceFloor(rec.Fence, step))
}

// maxTTLMicros is the longest lifetime a time.Duration holds.
const maxTTLMicros = math.MaxInt64 / int64(time.Microsecond)

// decode reads the record document of key from snap (exists = false when
// there is none). A document whose key is not key (copied or edited by
// hand) is reported, never trusted.
func decode(op, key string, snap *firestore.DocumentSnapshot) (*doc, error) {
	d := &doc{key: key, readTime: snap.ReadTime}
	if !snap.Exists() {
		return d, nil
	}
	d.exists, d.updateTime = true, snap.UpdateTime
	m := snap.Data()
	stored, ok := fromText(m[fieldKey])
	switch {
	case !ok:
		return nil, malformed(op, "the key field is missing or not text")
	case stored != key || docID(stored) != snap.Ref.ID:
		return nil, malformed(op, "the record's key does not match its document id")
	}
	if d.fp, ok = fromText(m[fieldFingerprint]); !ok {
		return nil, malformed(op, "the fingerprint field is missing or not text")
	}
	state, ok := m[fieldState].(int64)
	if !ok || state < 0 || state > int64(store.StateNotReplayable) {
		return nil, malformed(op, "the state field is missing or not a known state")
	}
	fence, ok := m[fieldFence].(int64)
	if !ok || fence < 0 {
		return nil, malformed(op, "the fence field is missing or not a non-negative integer")
	}
	ttl, ok := m[fieldTTL].(int64)
	if !ok || ttl < 0 || ttl > maxTTLMicros {
		return nil, malformed(op, "the ttlMicros field is missing or not a non-negative integer")
	}
	d.state, d.fence, d.ttl = store.State(state), idemkit.Fence(fence), time.Duration(ttl)*time.Microsecond
	if d.response, ok = m[fieldResponse].([]byte); !ok && m[fieldResponse] != nil {
		return nil, malformed(op, "the response field is not bytes")
	}
	d.createdAt = d.updateTime
	for _, f := range [...]struct {
		name     string
		to       *time.Time
		required bool
	}{{fieldCreatedAt, &d.createdAt, false}, {fieldHeldUntil, &d.heldUntil, false}, {fieldLeaseUntil, &d.leaseUntil, false}, {fieldExpireAt, &d.expireAt, true}} {
		if v, ok := m[f.name]; ok || f.required {
			if *f.to, ok = v.(time.Time); !ok {
				return nil, malformed(op, "the "+f.name+" field is missing or not a timestamp")
			}
		}
	}
	if d.writeID, ok = m[fieldWriteID].(string); !ok {
		return nil, malformed(op, "the writeId field is missing or not a string")
	}
	if v, ok := m[fieldSteps]; ok {
		if d.steps, ok = decodeSteps(v); !ok {
			return nil, malformed(op, "the steps field is not a map of step indexes 0 to n-1 to a name and a result")
		}
	}
	return d, nil
}

// decodeSteps reads the value of fieldSteps.
func decodeSteps(v any) ([]store.Step, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) > store.MaxSteps {
		return nil, false
	}
	steps := make([]store.Step, len(m))
	for i := range steps {
		s, ok := m[strconv.Itoa(i)].(map[string]any)
		if !ok {
			return nil, false
		}
		name, ok1 := s[stepName].(string)
		result, ok2 := s[stepResult].([]byte)
		if !ok1 || !ok2 || len(s) != 2 {
			return nil, false
		}
		steps[i] = store.Step{Name: name, Result: result}
	}
	return steps, true
}

// stepPath is the field path of step index in a record document.
func stepPath(index int) firestore.FieldPath {
	return firestore.FieldPath{fieldSteps, strconv.Itoa(index)}
}

// stepValue is step as its record document holds it.
func stepValue(step store.Step) map[string]any {
	result := step.Result
	if result == nil {
		result = []byte{} // nil would be stored as null
	}
	return map[string]any{stepName: step.Name, stepResult: result}
}

// micros is a lifetime in whole microseconds, as Firestore keeps times.
func micros(ttl time.Duration) time.Duration { return ttl.Truncate(time.Microsecond) }

// contents is what one write puts in a record document: every field.
type contents struct {
	key, fp  string
	state    store.State
	response []byte
	fence    idemkit.Fence
	ttl      time.Duration
	expireAt time.Time
	writeID  string
	stepped  bool // the document written over has steps (fieldSteps, and maybe fieldLeaseUntil) ...
	carry    bool // ... which an update keeps (leaving fieldSteps as it is) or else removes
}

// updates returns the fields of c.
func (c *contents) updates() []firestore.Update {
	response := c.response
	if response == nil {
		response = []byte{}
	}
	u := []firestore.Update{
		{Path: fieldKey, Value: text(c.key)},
		{Path: fieldFingerprint, Value: text(c.fp)},
		{Path: fieldState, Value: int64(c.state)},
		{Path: fieldResponse, Value: response},
		{Path: fieldFence, Value: int64(c.fence)},
		{Path: fieldTTL, Value: int64(micros(c.ttl) / time.Microsecond)},
		{Path: fieldExpireAt, Value: c.expireAt},
		{Path: fieldWriteID, Value: c.writeID},
	}
	if c.state == store.StateClaimed && engine.LockID(c.fp) {
		u = append(u, firestore.Update{Path: fieldLockID, Value: c.fp})
	}
	return u
}

// data returns c as a whole document, for a Create.
func (c *contents) data() map[string]any {
	m := make(map[string]any, 10)
	for _, u := range c.updates() {
		m[u.Path] = u.Value
	}
	return m
}

// fields returns the field updates of c for an update of an existing
// document: every field of c, and the fields only some records carry
// removed unless c sets them; those of steps only when the document has
// steps, so that a write over one without steps is what it was before
// steps (and the steps themselves not when c carries them).
func (c *contents) fields() []firestore.Update {
	u := c.updates()
	for _, f := range [...]string{fieldCreatedAt, fieldHeldUntil, fieldLockID} {
		if !slices.ContainsFunc(u, func(u firestore.Update) bool { return u.Path == f }) {
			u = append(u, firestore.Update{Path: f, Value: firestore.Delete})
		}
	}
	if c.stepped {
		u = append(u, firestore.Update{Path: fieldLeaseUntil, Value: firestore.Delete})
		if !c.carry {
			u = append(u, firestore.Update{Path: fieldSteps, Value: firestore.Delete})
		}
	}
	return u
}

// extension returns the field updates that set the lease of a claim made
// at created and running out at until to ttl from the commit time.
func extension(ttl time.Duration, created, until, expireAt time.Time, writeID string) []firestore.Update {
	return []firestore.Update{
		{Path: fieldCreatedAt, Value: created},
		{Path: fieldHeldUntil, Value: until},
		{Path: fieldTTL, Value: int64(micros(ttl) / time.Microsecond)},
		{Path: fieldExpireAt, Value: expireAt},
		{Path: fieldWriteID, Value: writeID},
	}
}

// lifetimeEnd returns the expireAt of a claim or outcome whose lifetime
// ttl starts at its commit, after now (an estimate of Firestore's clock):
// [keepRecord] of it, padded by [expireSlack] for the time a write takes
// to land.
func lifetimeEnd(now time.Time, ttl time.Duration, fence idemkit.Fence, claim bool, step time.Duration) time.Time {
	end := now.Add(micros(ttl) + expireSlack)
	if claim {
		end = end.Add(store.ClaimRetention)
	}
	return clampTime(later(end, fenceFloor(fence, step)))
}

// maxTimestamp is the latest time a Firestore timestamp holds: fences
// from about 2.5×10^14 on (the year 9999) are kept until then.
var maxTimestamp = time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC)

// fenceFloor is when Firestore's clock has passed fence read as Unix
// milliseconds plus the largest clock step: the expireAt of a tombstone
// (see [store.Store]).
func fenceFloor(fence idemkit.Fence, step time.Duration) time.Time {
	return clampTime(time.UnixMilli(int64(min(fence, idemkit.FenceMax)) + 1).Add(step))
}

func clampTime(t time.Time) time.Time {
	if t.After(maxTimestamp) {
		return maxTimestamp
	}
	return t.UTC()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// text returns s as a Firestore value: a string when s is valid UTF-8,
// else bytes.
func text(s string) any {
	if utf8.ValidString(s) {
		return s
	}
	return []byte(s)
}

// fromText reverses [text].
func fromText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}
