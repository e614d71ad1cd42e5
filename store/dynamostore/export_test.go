package dynamostore

import "time"

// WithClock sets the clock the store judges leases by and takes fences
// from (default time.Now): the suites move it instead of sleeping.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// AttrExpireAt is the TTL attribute, which every item must carry.
const AttrExpireAt = attrExpireAt

// EncodeKey is the partition key of a record key.
var EncodeKey = encodeKey
