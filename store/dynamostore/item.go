package dynamostore

import (
	"crypto/rand"
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// The attributes of a record item (docs/backends.md, "DynamoDB"). Times
// are Unix milliseconds by the writing client's clock, but for expireAt.
const (
	attrKey         = "pk"       // the record key (the partition key, a string: see encodeKey)
	attrFingerprint = "fp"       // the request's fingerprint: a string, or binary when it is not valid UTF-8; absent on a deleted record's tombstone
	attrState       = "st"       // 0 released or deleted, 1 claimed, 2 completed, 3 not replayable
	attrFence       = "fe"       // the fence of the claim
	attrExpires     = "ex"       // when the lease or the outcome runs out
	attrCreated     = "ca"       // when the claim or outcome was written
	attrResponse    = "rs"       // the encoded response (binary); absent when empty
	attrExpireAt    = "expireAt" // when DynamoDB's TTL may delete the item, in Unix seconds: the TTL attribute
	attrLockID      = "lockId"   // only on a claim whose fingerprint is a lock id: the fingerprint again, the key of the lock-id index
	attrWriteID     = "wid"      // on a claim and on an outcome Complete wrote: a random id of that write (of the last step's, once a claim recorded one)
	attrSteps       = "sp"       // only once a claim recorded a step: its steps, a list of maps {n: name (S), r: result (B, absent when empty)}
	attrStepCount   = "sc"       // only with sp: how many steps it holds, which RecordStep's condition checks
)

// The attributes of a step in attrSteps.
const (
	attrStepName   = "n"
	attrStepResult = "r"
)

// lockIndex is the global secondary index on attrLockID that
// [Store.FindClaim] queries.
const lockIndex = "lockId-index"

// released is the state of a tombstone: what a release or delete leaves,
// invisible and claimable, with its fence (and after a release the
// claim's fingerprint and steps, for the next claim).
const released store.State = 0

// encodedPrefix marks a partition key that is its record key in base64url.
const encodedPrefix = "#"

// encodeKey returns the partition key of a record key (any bytes): the key
// itself when it is valid UTF-8 that does not start with [encodedPrefix],
// so an operator reads it as it is, else the prefix and its unpadded
// base64url (at most 1,367 bytes for a 1,024-byte key, under DynamoDB's
// 2,048). Distinct keys never share an item.
func encodeKey(key string) string {
	if utf8.ValidString(key) && !strings.HasPrefix(key, encodedPrefix) {
		return key
	}
	return encodedPrefix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// decodeKey reverses [encodeKey].
func decodeKey(pk string) (string, bool) {
	if !strings.HasPrefix(pk, encodedPrefix) {
		return pk, true
	}
	b, err := base64.RawURLEncoding.DecodeString(pk[len(encodedPrefix):])
	return string(b), err == nil
}

// item is a record item as read.
type item struct {
	key       string
	fp        string
	state     store.State
	fence     idemkit.Fence
	expires   int64 // ms
	created   int64 // ms
	response  []byte
	writeID   string
	hasLockID bool
	expireAt  int64        // s; 0 when absent
	steps     []store.Step // the recorded steps (attrSteps); nil without any
}

// stepsKept reports whether the item's steps are there for a new claim at
// now (ms): it has some, and its TTL, which DynamoDB may not have acted on
// yet, has not passed.
func (it *item) stepsKept(now int64) bool {
	return len(it.steps) > 0 && now < it.expireAt*1000
}

// live reports whether the item holds a claim or an outcome that has not
// run out at now (ms): a claim for skew more than its lease, so that a
// client whose clock runs ahead by up to skew takes it over no earlier
// than its holder's clock says.
func (it *item) live(now, skew int64) bool {
	switch it.state {
	case store.StateClaimed:
		return now < it.expires+skew
	case store.StateCompleted, store.StateNotReplayable:
		return now < it.expires
	}
	return false
}

// record is the record the item holds.
func (it *item) record() store.Record {
	rec := store.Record{
		Key: it.key, Fingerprint: it.fp, State: it.state, Fence: it.fence,
		CreatedAt: time.UnixMilli(it.created), ExpiresAt: time.UnixMilli(it.expires),
	}
	if len(it.response) > 0 {
		rec.Response = it.response
	}
	if it.state == store.StateClaimed && len(it.steps) > 0 {
		rec.Steps = it.steps
	}
	return rec
}

func newWriteID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decode reads the item m of key (nil when m is empty: no item). An item
// whose partition key is not key's is reported, never trusted.
func decode(op, key string, m map[string]types.AttributeValue) (*item, error) {
	if len(m) == 0 {
		return nil, nil
	}
	pk, ok := m[attrKey].(*types.AttributeValueMemberS)
	if !ok || pk.Value != encodeKey(key) {
		return nil, malformed(op, "the partition key is missing or not the record's")
	}
	it := &item{key: key}
	switch v := m[attrFingerprint].(type) {
	case nil:
	case *types.AttributeValueMemberS:
		it.fp = v.Value
	case *types.AttributeValueMemberB:
		it.fp = string(v.Value)
	default:
		return nil, malformed(op, "the fp attribute is not a string or binary")
	}
	st, ok := number(m[attrState])
	if !ok || st < 0 || st > int64(store.StateNotReplayable) {
		return nil, malformed(op, "the st attribute is missing or not a known state")
	}
	fence, ok := number(m[attrFence])
	if !ok || fence < 0 {
		return nil, malformed(op, "the fe attribute is missing or not a non-negative integer")
	}
	if it.expires, ok = number(m[attrExpires]); !ok {
		return nil, malformed(op, "the ex attribute is missing or not an integer")
	}
	if v, present := m[attrCreated]; present {
		if it.created, ok = number(v); !ok {
			return nil, malformed(op, "the ca attribute is not an integer")
		}
	}
	switch v := m[attrResponse].(type) {
	case nil:
	case *types.AttributeValueMemberB:
		it.response = v.Value
	default:
		return nil, malformed(op, "the rs attribute is not binary")
	}
	if v, ok := m[attrWriteID].(*types.AttributeValueMemberS); ok {
		it.writeID = v.Value
	}
	_, it.hasLockID = m[attrLockID]
	if v, present := m[attrExpireAt]; present {
		if it.expireAt, ok = number(v); !ok {
			return nil, malformed(op, "the expireAt attribute is not an integer")
		}
	}
	steps, err := decodeSteps(op, m)
	if err != nil {
		return nil, err
	}
	it.steps = steps
	it.state, it.fence = store.State(st), idemkit.Fence(fence)
	return it, nil
}

// decodeSteps reads the steps of item m (nil without any): attrSteps,
// which must hold as many steps as attrStepCount says. Each result is a
// copy, never the response's memory.
func decodeSteps(op string, m map[string]types.AttributeValue) ([]store.Step, error) {
	count, present := m[attrStepCount]
	list, listed := m[attrSteps]
	if !present && !listed {
		return nil, nil
	}
	n, ok := number(count)
	l, isList := list.(*types.AttributeValueMemberL)
	if !ok || !isList || n != int64(len(l.Value)) || n < 1 || n > store.MaxSteps {
		return nil, malformed(op, "the sp and sc attributes do not hold the same number of steps")
	}
	steps := make([]store.Step, len(l.Value))
	for i, v := range l.Value {
		sm, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			return nil, malformed(op, "a step in sp is not a map")
		}
		name, ok := sm.Value[attrStepName].(*types.AttributeValueMemberS)
		if !ok || name.Value == "" {
			return nil, malformed(op, "a step in sp has no name")
		}
		steps[i].Name = name.Value
		switch r := sm.Value[attrStepResult].(type) {
		case nil:
		case *types.AttributeValueMemberB:
			steps[i].Result = append([]byte(nil), r.Value...)
		default:
			return nil, malformed(op, "a step's result in sp is not binary")
		}
	}
	return steps, nil
}

// stepValue is the attribute of step in attrSteps: a list of it alone,
// for list_append.
func stepValue(step store.Step) types.AttributeValue {
	m := map[string]types.AttributeValue{attrStepName: &types.AttributeValueMemberS{Value: step.Name}}
	if len(step.Result) > 0 {
		m[attrStepResult] = &types.AttributeValueMemberB{Value: step.Result}
	}
	return &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: m}}}
}

func number(v types.AttributeValue) (int64, bool) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	return i, err == nil
}

func num(i int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(i, 10)}
}

// text returns s as an attribute: a string when s is valid UTF-8, else
// binary.
func text(s string) types.AttributeValue {
	if utf8.ValidString(s) {
		return &types.AttributeValueMemberS{Value: s}
	}
	return &types.AttributeValueMemberB{Value: []byte(s)}
}

// contents is what a whole-item write (a claim, an outcome) puts there.
type contents struct {
	key      string
	fp       string
	state    store.State
	fence    idemkit.Fence
	expires  int64 // ms
	created  int64 // ms
	response []byte
	expireAt int64  // s
	writeID  string // "" for none
}

func (c *contents) item() map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrKey:      &types.AttributeValueMemberS{Value: encodeKey(c.key)},
		attrState:    num(int64(c.state)),
		attrFence:    num(int64(c.fence)),
		attrExpires:  num(c.expires),
		attrCreated:  num(c.created),
		attrExpireAt: num(c.expireAt),
	}
	if c.fp != "" {
		m[attrFingerprint] = text(c.fp)
	}
	if len(c.response) > 0 {
		m[attrResponse] = &types.AttributeValueMemberB{Value: c.response}
	}
	if c.writeID != "" {
		m[attrWriteID] = &types.AttributeValueMemberS{Value: c.writeID}
	}
	if c.state == store.StateClaimed && engine.LockID(c.fp) {
		m[attrLockID] = &types.AttributeValueMemberS{Value: c.fp}
	}
	return m
}

// expireAt returns the TTL attribute of a record of fence that runs out at
// expires (ms; a claim's lease when claim): the rule of [store.Store] for
// when a record may go (a claim kept [store.ClaimRetention] past its lease,
// no record before its fence plus the largest clock step), plus the skew
// margin, since DynamoDB deletes by its own clock, rounded up to the
// second.
func expireAt(expires int64, fence idemkit.Fence, claim bool, step, skew time.Duration) int64 {
	until := expires
	if claim {
		until = sat(until, store.ClaimRetention.Milliseconds())
	}
	until = max(until, sat(int64(min(fence, idemkit.FenceMax))+1, step.Milliseconds()))
	until = sat(until, skew.Milliseconds())
	return until/1000 + 1
}

// sat adds b ≥ 0 to a without overflow.
func sat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// DynamoDB's item limit, and what an item holds besides its key,
// fingerprint and response: the attribute names and numbers of up to 21
// digits (DynamoDB counts a number as at most 21 bytes), with room to
// spare. A claim's steps may add stepsBytes: store.MaxStepBytes of names
// and results and, per step, its list element, its map and the map's
// attribute names (DynamoDB counts 3 bytes for a list or map, 1 per
// element, and the names: 8 bytes a step), then sp and sc themselves,
// with room to spare. A claim has no response and an outcome no steps, so
// a fingerprint that leaves stepsBytes free holds both.
const (
	maxItemBytes = 400 << 10
	itemOverhead = 256
	stepsBytes   = store.MaxStepBytes + 16*store.MaxSteps + 64
)

// maxResponse returns the largest response an item of key and fp holds
// (negative when even an empty one does not fit).
func maxResponse(key, fp string) int {
	return maxItemBytes - itemOverhead - len(encodeKey(key)) - 2*len(fp)
}
