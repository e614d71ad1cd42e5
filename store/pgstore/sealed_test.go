package pgstore

import (
	"testing"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestSealedRecordsOnPostgres runs the sealed-record scenario on one
// table, reading the record's row back: every column, the bytea ones as
// their bytes, and the whole row as text.
func TestSealedRecordsOnPostgres(t *testing.T) {
	url := testenv.Postgres(t).URL
	admin := newPool(t, url, 2)
	opt := table(t, admin)
	var naming *Store
	guardtest.Sealed(t,
		func(t *testing.T) store.Store {
			s, err := New(newPool(t, url, 4), opt)
			if err != nil {
				t.Fatal(err)
			}
			naming = s
			return s
		},
		func(t *testing.T, recordKey string) []guardtest.Field {
			var key, row string
			var fp, response []byte
			err := admin.QueryRow(t.Context(), `SELECT r.key, r.fingerprint, r.response, r::text FROM `+tableOf(naming)+` r WHERE r.key = $1`,
				storedKey(recordKey)).Scan(&key, &fp, &response, &row)
			if err != nil {
				t.Fatalf("reading the record's row: %v", err)
			}
			return []guardtest.Field{
				{Name: "key", Value: []byte(key)}, {Name: "fingerprint", Value: fp},
				{Name: "response", Value: response}, {Name: "row", Value: []byte(row)},
			}
		})
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared server: sealing keeps the contract and adds no round trip. The
// response limit is the store's, less the envelope.
func TestSealedConformance(t *testing.T) {
	const limit = 1 << 20
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		url := testenv.Postgres(t).URL
		admin := newPool(t, url, 2)
		opt := table(t, admin)
		var st statements
		pool := newPool(t, url, 8, traced(&st))
		s, err := New(pool, opt, WithMaxResponseBytes(limit))
		if err != nil {
			t.Fatal(err)
		}
		current, retired := guardtest.SealKeys()
		ss, err := store.Seal(s, retired, current)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: ss, Margin: margin, Break: pool.Close, MaxResponseBytes: limit - guardtest.SealOverhead(retired),
			RoundTrips: st.count, Keys: immortal(admin, s),
		}
	})
}

// TestSealedRecordsTamperedOnPostgres changes sealed records' columns
// straight in their rows: no change makes a retry run the work again or
// replay anything but the authentic outcome.
func TestSealedRecordsTamperedOnPostgres(t *testing.T) {
	url := testenv.Postgres(t).URL
	admin := newPool(t, url, 2)
	opt := table(t, admin)
	var naming *Store
	newSealed := func(t *testing.T) store.Store {
		s, err := New(newPool(t, url, 4), opt)
		if err != nil {
			t.Fatal(err)
		}
		naming = s
		return s
	}
	guardtest.SealedTampering(t, newSealed, func(t *testing.T, recordKey string, change guardtest.Tampering) {
		state := int16(change.State) // 0: unchanged
		if change.Tombstone {
			state = stateTombstone
		}
		tag, err := admin.Exec(t.Context(), `UPDATE `+tableOf(naming)+` SET
	state = CASE WHEN $2 OR $3::smallint <> 0 THEN $3::smallint ELSE state END,
	expires_at = CASE WHEN $4 THEN clock_timestamp() - interval '1 second' ELSE expires_at END,
	fence = fence + $5::bigint,
	fingerprint = CASE WHEN $6::text <> '' THEN convert_to($6::text, 'UTF8') ELSE fingerprint END
WHERE key = $1::text`, storedKey(recordKey), change.Tombstone, state, change.Expired, change.Fence, change.Fingerprint)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("changing the record's row: %v, %v", tag, err)
		}
	})
}
