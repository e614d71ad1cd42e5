package redisstore_test

import (
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestSealedRecordsOnRedis runs the sealed-record scenario on a single
// node and on the cluster, reading the record's hash back with HGETALL.
func TestSealedRecordsOnRedis(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := b.newClient(t)
			naming := newStore(t, c)
			guardtest.Sealed(t,
				func(t *testing.T) store.Store { return newStore(t, b.newClient(t)) },
				func(t *testing.T, recordKey string) []guardtest.Field {
					hash, err := c.HGetAll(t.Context(), redisstore.RedisKey(naming, recordKey)).Result()
					if err != nil {
						t.Fatal(err)
					}
					var fields []guardtest.Field
					for name, value := range hash {
						fields = append(fields, guardtest.Field{Name: name, Value: []byte(value)})
					}
					return fields
				})
		})
	}
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared single node: sealing keeps the contract and adds no round trip.
// The response limit is the store's, less the envelope.
func TestSealedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		addr := testenv.Redis(t).Addr
		e := conformanceEnv(t, nodeClient(t, addr), nodeClient(t, addr))
		current, retired := guardtest.SealKeys()
		s, err := store.Seal(e.Store, retired, current)
		if err != nil {
			t.Fatal(err)
		}
		e.Store = s
		e.MaxResponseBytes -= guardtest.SealOverhead(retired)
		return e
	})
}

// TestSealedRecordsTamperedOnRedis changes sealed records' fields straight
// in their hashes, on a single node and on the cluster: no change makes a
// retry run the work again or replay anything but the authentic outcome.
func TestSealedRecordsTamperedOnRedis(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := b.newClient(t)
			naming := newStore(t, c)
			states := map[store.State]string{store.StateClaimed: "claimed", store.StateCompleted: "completed", store.StateNotReplayable: "not-replayable"}
			guardtest.SealedTampering(t,
				func(t *testing.T) store.Store { return newStore(t, b.newClient(t)) },
				func(t *testing.T, recordKey string, change guardtest.Tampering) {
					ctx := t.Context()
					k := redisstore.RedisKey(naming, recordKey)
					var fields []any
					if s := states[change.State]; s != "" {
						fields = append(fields, "state", s)
					}
					if change.Tombstone {
						fields = append(fields, "state", "released")
					}
					if change.Expired {
						now, err := c.Time(ctx).Result() // TIME of the key's node: the clock the script reads
						if err != nil {
							t.Fatal(err)
						}
						fields = append(fields, "expires", strconv.FormatInt(now.UnixMilli()-1000, 10))
					}
					if change.Fence != 0 {
						fence, err := c.HGet(ctx, k, "fence").Int64()
						if err != nil {
							t.Fatal(err)
						}
						fields = append(fields, "fence", strconv.FormatInt(fence+change.Fence, 10))
					}
					if change.Fingerprint != "" {
						fields = append(fields, "fp", change.Fingerprint)
					}
					if err := c.HSet(ctx, k, fields...).Err(); err != nil {
						t.Fatal(err)
					}
				})
		})
	}
}
