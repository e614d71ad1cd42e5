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

// listMaxQueries bounds the queries of one List page: past it, a page
// holds what it found (maybe nothing but expired documents and tombstones
// were read) and its cursor goes on.
const listMaxQueries = 8

// List implements [store.Lister]: a range query on the key field, which
// every record document holds (so keys stored under a hashed document id,
// "/" in them or too long, are listed too), in the order of the keys
// (Firestore orders strings by their UTF-8 bytes), after the key the
// cursor names (its unpadded base64url). A record whose key is not valid
// UTF-8 is listed only under a prefix that is not valid UTF-8 either (its
// key field holds bytes, not a string). It needs the automatic
// single-field index on the key field. Each query reads up to limit + 1
// documents; expired records and tombstones are read and skipped, and a
// page ends after a bounded number of queries.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	if err := engine.ValidateList(limit); err != nil {
		return nil, "", err
	}
	from, err := base64.RawURLEncoding.DecodeString(after)
	text := utf8.ValidString(prefix)
	if err != nil || text && !utf8.Valid(from) {
		return nil, "", idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
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
			k, ok := fromText(snap.Data()[fieldKey])
			if !ok {
				return nil, "", malformed(op, "the key field is missing or not text")
			}
			d, err := decode(op, k, snap)
			if err != nil {
				return nil, "", err
			}
			if !d.live() {
				last = k
				continue
			}
			if len(recs) == limit {
				return recs, base64.RawURLEncoding.EncodeToString([]byte(recs[limit-1].Key)), nil
			}
			recs = append(recs, d.record())
			last = k
		}
		if len(snaps) <= limit {
			return recs, "", nil // the range is read to its end
		}
	}
	return recs, base64.RawURLEncoding.EncodeToString([]byte(last)), nil
}

// successor returns the least key above every key that starts with p, in
// Firestore's order (by UTF-8 bytes for text, by bytes for bytes); false
// when there is none (p is empty, or only the greatest code points or
// bytes).
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
