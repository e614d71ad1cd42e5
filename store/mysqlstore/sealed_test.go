package mysqlstore

import (
	"testing"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestSealedRecordsOnMySQL runs the sealed-record scenario on one table,
// reading the record's row back: every column that holds bytes, and the
// whole row as text.
func TestSealedRecordsOnMySQL(t *testing.T) {
	dsn := testenv.MySQL(t).DSN
	admin := newDB(t, dsn, 2, nil)
	opt := table(t, admin)
	var naming *Store
	guardtest.Sealed(t,
		func(t *testing.T) store.Store {
			s, err := New(newDB(t, dsn, 4, nil), opt)
			if err != nil {
				t.Fatal(err)
			}
			naming = s
			return s
		},
		func(t *testing.T, recordKey string) []guardtest.Field {
			var key, fp, response, row []byte
			err := admin.QueryRowContext(t.Context(), `SELECT record_key, fingerprint, response,
				CONCAT_WS(',', record_key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
				FROM `+tableOf(naming)+` WHERE record_key = ?`, []byte(recordKey)).Scan(&key, &fp, &response, &row)
			if err != nil {
				t.Fatalf("reading the record's row: %v", err)
			}
			return []guardtest.Field{
				{Name: "key", Value: key}, {Name: "fingerprint", Value: fp},
				{Name: "response", Value: response}, {Name: "row", Value: row},
			}
		})
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared server: sealing keeps the contract and adds no round trip. The
// response limit is the store's, less the envelope.
func TestSealedConformance(t *testing.T) {
	const limit = 1 << 20
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		dsn := testenv.MySQL(t).DSN
		admin := newDB(t, dsn, 2, nil)
		opt := table(t, admin)
		var rt roundTrips
		db := newDB(t, dsn, 8, &rt)
		s, err := New(db, opt, WithMaxResponseBytes(limit))
		if err != nil {
			t.Fatal(err)
		}
		current, retired := guardtest.SealKeys()
		ss, err := store.Seal(s, retired, current)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: ss, Margin: margin, Break: func() { _ = db.Close() }, MaxResponseBytes: limit - guardtest.SealOverhead(retired),
			RoundTrips: rt.count, Keys: immortal(admin, s),
		}
	})
}

// TestSealedRecordsTamperedOnMySQL changes sealed records' columns
// straight in their rows: no change makes a retry run the work again or
// replay anything but the authentic outcome.
func TestSealedRecordsTamperedOnMySQL(t *testing.T) {
	dsn := testenv.MySQL(t).DSN
	admin := newDB(t, dsn, 2, nil)
	opt := table(t, admin)
	var naming *Store
	newSealed := func(t *testing.T) store.Store {
		s, err := New(newDB(t, dsn, 4, nil), opt)
		if err != nil {
			t.Fatal(err)
		}
		naming = s
		return s
	}
	guardtest.SealedTampering(t, newSealed, func(t *testing.T, recordKey string, change guardtest.Tampering) {
		state := int(change.State) // 0: unchanged
		if change.Tombstone {
			state = 0
		}
		res, err := admin.ExecContext(t.Context(), `UPDATE `+tableOf(naming)+` SET
	state = CASE WHEN ? OR ? <> 0 THEN ? ELSE state END,
	expires_at = CASE WHEN ? THEN `+nowSQL+` - 1000000 ELSE expires_at END,
	fence = fence + ?,
	fingerprint = CASE WHEN ? <> '' THEN ? ELSE fingerprint END
WHERE record_key = ?`, change.Tombstone, state, state, change.Expired, change.Fence, change.Fingerprint, []byte(change.Fingerprint), []byte(recordKey))
		if err != nil {
			t.Fatalf("changing the record's row: %v", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("changing the record's row: %d rows, %v", n, err)
		}
	})
}
