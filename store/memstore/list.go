package memstore

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// List implements [store.Lister]: the live records under prefix in the
// byte order of their keys, after the key the cursor names (its unpadded
// base64url). It reads every entry of the store under its read lock, so a
// call costs time in proportion to the store's size.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	if err := engine.ValidateList(limit); err != nil {
		return nil, "", err
	}
	from, err := base64.RawURLEncoding.DecodeString(after)
	if err != nil {
		return nil, "", idemkit.NewError(idemkit.CodeInvalidArgument, op, "the cursor is not one this store made", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, "", err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, "", closedErr(op)
	}
	now := s.now()
	var keys []string
	for k, e := range s.entries {
		if strings.HasPrefix(k, prefix) && (after == "" || k > string(from)) && e.live(now) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte(keys[limit-1]))
	}
	recs := make([]store.Record, len(keys))
	for i, k := range keys {
		recs[i] = clone(&s.entries[k].rec)
	}
	return recs, next, nil
}
