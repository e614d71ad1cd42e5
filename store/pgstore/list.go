package pgstore

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// List implements [store.Lister]: one query, range scans of the primary
// key for the verbatim keys and for the hex ones (matched by the hex of
// the prefix), in stored-key order (bytewise), after the stored key the
// cursor holds in unpadded base64url.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	if err := engine.ValidateList(limit); err != nil {
		return nil, "", err
	}
	from, err := base64.RawURLEncoding.DecodeString(after)
	if err != nil || strings.ContainsRune(string(from), 0) {
		return nil, "", idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, "", err
	}
	var lo, hi *string // the verbatim keys' range
	if verbatim(prefix) {
		// The verbatim keys that start with the prefix.
		lo = &prefix
		if prefix != "" {
			up := successor(prefix)
			hi = &up
		}
	}
	hexLo := `\x` + hex.EncodeToString([]byte(prefix))
	hexHi := successor(hexLo)
	var (
		keys               []string
		fps, responses     [][]byte
		steps              [][]byte
		states             []int16
		fences             []int64
		created, expiresAt []time.Time
	)
	err = retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		return true, s.db.QueryRow(ctx, s.q.list, lo, hi, hexLo, hexHi, string(from), limit+1).
			Scan(&keys, &fps, &states, &responses, &fences, &created, &expiresAt, &steps)
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte(keys[limit-1]))
	}
	recs := make([]store.Record, len(keys))
	for i, sk := range keys {
		key, ok := recordKey(sk)
		if !ok {
			return nil, "", idemkit.NewError(idemkit.CodeInternal, op, "a stored key is neither verbatim nor \\x and hex", nil)
		}
		r := row{fp: fps[i], state: states[i], response: responses[i], fence: fences[i], createdAt: created[i], expiresAt: expiresAt[i], steps: steps[i]}
		if recs[i], err = r.record(op, key); err != nil {
			return nil, "", err
		}
	}
	return recs, next, nil
}

// recordKey is the inverse of storedKey.
func recordKey(stored string) (string, bool) {
	h, ok := strings.CutPrefix(stored, `\x`)
	if !ok {
		return stored, true
	}
	b, err := hex.DecodeString(h)
	return string(b), err == nil
}

// successor returns the least string above every string that starts with
// p (printable ASCII, not empty), in the table's "C" collation.
func successor(p string) string {
	return p[:len(p)-1] + string(p[len(p)-1]+1)
}
