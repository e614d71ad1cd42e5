package firestorestore

import (
	"context"
	"encoding/base64"
	"unicode/utf8"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// listMaxQueries bounds the queries of one List page (expired records and
// tombstones are read and skipped); its cursor goes on.
const listMaxQueries = 8

// List implements [store.Lister]: range queries on the key field (so
// hashed document ids are listed too), in the order of the keys' UTF-8
// bytes, after the key the cursor names (its unpadded base64url). A key
// that is not valid UTF-8 is stored as bytes and listed only under a
// prefix that is not valid UTF-8 either.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	from, err := base64.RawURLEncoding.DecodeString(after)
	text := utf8.ValidString(prefix)
	if err != nil || text && !utf8.Valid(from) {
		err = idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
	}
	if err := engine.Ready(ctx, op, engine.ValidateList(limit), err); err != nil {
		return nil, "", err
	}
	// value is a key as the key field holds it in this listing.
	value := func(k string) any {
		if text {
			return k
		}
		return []byte(k)
	}
	q := s.records.Where(fieldKey, ">=", value(prefix))
	if up, ok := successor(prefix, text); ok {
		q = q.Where(fieldKey, "<", value(up))
	}
	q = q.OrderBy(fieldKey, firestore.Asc).Limit(limit + 1)
	var recs []store.Record
	last := string(from)
	for range listMaxQueries {
		qq := q
		if last != "" {
			qq = q.StartAfter(value(last))
		}
		snaps, err := qq.Documents(ctx).GetAll()
		if err != nil {
			return nil, "", mapError(ctx, op, err)
		}
		for _, snap := range snaps {
			d, err := decodeFound(op, snap)
			if err != nil {
				return nil, "", err
			}
			if d.live() {
				if len(recs) == limit {
					return recs, base64.RawURLEncoding.EncodeToString([]byte(recs[limit-1].Key)), nil
				}
				recs = append(recs, d.record())
			}
			last = d.key
		}
		if len(snaps) <= limit {
			return recs, "", nil // the range is read to its end
		}
	}
	return recs, base64.RawURLEncoding.EncodeToString([]byte(last)), nil
}

// successor returns the least key above every key that starts with p, in
// Firestore's order, or false when there is none.
func successor(p string, text bool) (string, bool) {
	if !text {
		b := []byte(p)
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] < 0xff {
				b[i]++
				return string(b[:i+1]), true
			}
		}
		return "", false
	}
	r := []rune(p)
	for i := len(r) - 1; i >= 0; i-- {
		switch {
		case r[i] == utf8.MaxRune:
			continue
		case r[i] == 0xD7FF:
			r[i] = 0xE000 // past the surrogates, which UTF-8 does not encode
		default:
			r[i]++
		}
		return string(r[:i+1]), true
	}
	return "", false
}

// FindClaim returns the live claim whose fingerprint is fp, a lock id (22
// base64url characters), or ok = false: one query on the lockId field,
// which only such claims carry (so its index costs the guard nothing). It
// is the lock library's Finder ([github.com/idemkit/idemkit/lock]): a lease
// is released, extended or looked up by its id from any process. Any other
// fp finds nothing, without I/O.
func (s *Store) FindClaim(ctx context.Context, fp string) (store.Record, bool, error) {
	const op = "find"
	if !engine.LockID(fp) {
		return store.Record{}, false, nil
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	// A lock id is random: several documents carry it only if one id
	// claimed several keys.
	snaps, err := s.records.Where(fieldLockID, "==", fp).Limit(8).Documents(ctx).GetAll()
	if err != nil {
		return store.Record{}, false, mapError(ctx, op, err)
	}
	for _, snap := range snaps {
		d, err := decodeFound(op, snap)
		if err != nil {
			return store.Record{}, false, err
		}
		if d.live() && d.state == store.StateClaimed && d.fp == fp {
			return d.record(), true, nil
		}
	}
	return store.Record{}, false, nil
}

// decodeFound decodes a document a query found, under the key it holds.
func decodeFound(op string, snap *firestore.DocumentSnapshot) (*doc, error) {
	k, ok := fromText(snap.Data()[fieldKey])
	if !ok {
		return nil, malformed(op, "the key field is missing or not text")
	}
	return decode(op, k, snap)
}
