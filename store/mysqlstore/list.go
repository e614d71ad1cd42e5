package mysqlstore

import (
	"context"
	"encoding/base64"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// List implements [store.Lister]: one SELECT, a range scan of the primary
// key, in key order (bytewise), after the key the cursor holds in unpadded
// base64url.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	if err := engine.ValidateList(limit); err != nil {
		return nil, "", err
	}
	from, err := base64.RawURLEncoding.DecodeString(after)
	if err != nil || len(from) > store.MaxKeyBytes {
		return nil, "", idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, "", err
	}
	query := s.q.listSQL([]byte(prefix), successor([]byte(prefix)), from, limit+1)
	var recs []store.Record
	err = retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		recs = recs[:0]
		rows, err := s.db.QueryContext(ctx, query)
		if err != nil {
			return true, err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r   row
				key []byte
			)
			if err := rows.Scan(append([]any{&key}, r.dest(true)...)...); err != nil {
				return true, err
			}
			rec, err := r.record(op, string(key))
			if err != nil {
				return false, err
			}
			recs = append(recs, rec)
		}
		return true, rows.Err()
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(recs) > limit {
		recs = recs[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte(recs[limit-1].Key))
	}
	return recs, next, nil
}

// successor returns the least byte string above every string that starts
// with p, or nil when there is none (p empty or all 0xff).
func successor(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			s := append([]byte(nil), p[:i+1]...)
			s[i]++
			return s
		}
	}
	return nil
}
