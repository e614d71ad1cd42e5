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
	attrFingerprint = "fp"       // the request's fingerprint: a string, or binary when it is not valid UTF-8; absent on a tombstone
	attrState       = "st"       // 0 released or deleted, 1 claimed, 2 completed, 3 not replayable
	attrFence       = "fe"       // the fence of the claim
	attrExpires     = "ex"       // when the lease or the outcome runs out
	attrCreated     = "ca"       // when the claim or outcome was written
	attrResponse    = "rs"       // the encoded response (binary); absent when empty
	attrExpireAt    = "expireAt" // when DynamoDB's TTL may delete the item, in Unix seconds: the TTL attribute
	attrLockID      = "lockId"   // only on a claim whose fingerprint is a lock id: the fingerprint again, the key of the lock-id index
	attrWriteID     = "wid"      // on a claim and on an outcome Complete wrote: a random id of that write
)

// lockIndex is the global secondary index on attrLockID that
// [Store.FindClaim] queries.
const lockIndex = "lockId-index"

// released is the state of a tombstone: what a release or delete leaves,
// its fence alone, invisible and claimable.
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
	it.state, it.fence = store.State(st), idemkit.Fence(fence)
	return it, nil
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
// spare.
const (
	maxItemBytes = 400 << 10
	itemOverhead = 256
)

// maxResponse returns the largest response an item of key and fp holds
// (negative when even an empty one does not fit).
func maxResponse(key, fp string) int {
	return maxItemBytes - itemOverhead - len(encodeKey(key)) - 2*len(fp)
}
