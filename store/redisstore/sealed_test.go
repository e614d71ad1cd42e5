package redisstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestSealedRecordsOnRedis runs the sealed-record scenario on a single
// node and on the cluster, reading the record's value back with GET.
func TestSealedRecordsOnRedis(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := b.newClient(t)
			naming := newStore(t, c)
			guardtest.Sealed(t,
				func(t *testing.T) store.Store { return newStore(t, b.newClient(t)) },
				func(t *testing.T, recordKey string) []guardtest.Field {
					v, err := c.Get(t.Context(), redisstore.RedisKey(naming, recordKey)).Result()
					if err != nil {
						t.Fatal(err)
					}
					rec, _, err := naming.Get(t.Context(), recordKey)
					if err != nil {
						t.Fatal(err)
					}
					return []guardtest.Field{{Name: "value", Value: []byte(v)}, {Name: "response", Value: rec.Response}}
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
			forms := map[store.State]byte{store.StateClaimed: 'c', store.StateCompleted: 'o', store.StateNotReplayable: 'n'}
			guardtest.SealedTampering(t,
				func(t *testing.T) store.Store { return newStore(t, b.newClient(t)) },
				func(t *testing.T, recordKey string, change guardtest.Tampering) {
					ctx := t.Context()
					now, err := c.Time(ctx).Result() // TIME of the key's node: the clock the scripts read
					if err != nil {
						t.Fatal(err)
					}
					_, err = redisstore.Rewrite(ctx, c, naming, recordKey, func(form *byte, rec *store.Record) {
						if f := forms[change.State]; f != 0 {
							*form = f
						}
						if change.Tombstone {
							*form = 'r'
						}
						if change.Expired {
							rec.ExpiresAt = now.Add(-time.Second)
						}
						rec.Fence = idemkit.Fence(int64(rec.Fence) + change.Fence)
						if change.Fingerprint != "" {
							rec.Fingerprint = change.Fingerprint
						}
					})
					if err != nil {
						t.Fatal(err)
					}
				})
		})
	}
}
