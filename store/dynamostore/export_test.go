package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idemkit"
)

// WithClock sets the clock the store judges leases by and takes fences
// from (default time.Now): the suites move it instead of sleeping.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// AttrExpireAt is the TTL attribute, which every item must carry.
const AttrExpireAt = attrExpireAt

// EncodeKey is the partition key of a record key.
var EncodeKey = encodeKey

// RaiseFence leaves a tombstone of fence f under key, as a release of a
// claim with that fence would.
func RaiseFence(ctx context.Context, s *Store, key string, f idemkit.Fence) error {
	now := s.now()
	c := &contents{key: key, state: released, fence: f, expires: now, expireAt: expireAt(now, f, false, s.cfg.step, s.cfg.skew)}
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.cfg.table, Item: c.item()})
	return err
}

// Stored reads the item of key: the fence it carries (0 without one) and
// whether it holds a record, live or run out (a tombstone does not).
func Stored(ctx context.Context, s *Store, key string) (fence idemkit.Fence, record bool, err error) {
	it, err := s.read(ctx, "test", key)
	if err != nil || it == nil {
		return 0, false, err
	}
	return it.fence, it.state != released, nil
}

// MaxResponse is the largest response an item of key and fp holds.
var MaxResponse = maxResponse

// StepsBytes is the room a claim's item keeps for its steps.
const StepsBytes = stepsBytes
