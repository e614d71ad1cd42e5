package storetest

import (
	"maps"
	"slices"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// testList checks a store that is a [store.Lister] (every store of this
// repository; another one is not asked to be), or one over a Lister
// through [store.List] (a sealed store, without the responses): its pages, a few records at
// a time, hold every live record under the prefix once (claims and
// outcomes, with their fields and responses) and nothing else: not a
// released claim, a deleted or expired outcome, nor a key outside the
// prefix, even one a glob pattern built from the prefix unescaped would
// match. The keys are readable ones, which every store lists: separators,
// glob characters, non-ASCII.
func testList(t *testing.T, e *Env) {
	list := func(prefix, after string, limit int) ([]store.Record, string, error) {
		if l, ok := e.Store.(store.Lister); ok {
			return l.List(t.Context(), prefix, after, limit)
		}
		// A store over a Lister (store.Seal): store.List lists through it,
		// without the responses.
		page, next, err := store.List(t.Context(), e.Store, prefix, after, limit)
		recs := make([]store.Record, len(page))
		for i, in := range page {
			recs[i] = in.Record
		}
		return recs, next, err
	}
	if _, _, err := list("", "", 1); idemkit.CodeOf(err) == idemkit.CodeInvalidArgument {
		t.Logf("%T is not (over) a store.Lister: nothing to check", e.Store)
		return
	}
	_, lister := e.Store.(store.Lister)
	prefix := key(t, "in*[x]?\\/")
	want := map[string]store.Record{}
	for i, suffix := range []string{"a", "b", "c/1", "c/2", "caf\u00e9", "sp ace", "x*y", "\u00e9t\u00e9/\U0001F512"} {
		c := mustClaim(t, e, prefix+suffix, longTTL)
		if i%4 == 3 {
			want[c.Key] = c // a running claim
			continue
		}
		out := outcome(c, "response "+suffix)
		if i%4 == 2 {
			out.State, out.Response = store.StateNotReplayable, nil
		}
		if !complete(t, e, out, longTTL) {
			t.Fatal("Complete refused")
		}
		got, _ := get(t, e, c.Key)
		want[c.Key] = got
	}
	// Not listed: keys outside the prefix (one matches the prefix as an
	// unescaped glob), a released claim, a deleted and an expired outcome.
	for _, k := range []string{key(t, "inside"), key(t, "in*[x]?\\"), key(t, "inX[x]a\\/b"), key(t, "out/a")} {
		c := mustClaim(t, e, k, longTTL)
		complete(t, e, outcome(c, "outside"), longTTL)
	}
	released := mustClaim(t, e, prefix+"released", longTTL)
	release(t, e, released.Key, released.Fence)
	deleted := mustClaim(t, e, prefix+"deleted", longTTL)
	complete(t, e, outcome(deleted, "deleted"), longTTL)
	del(t, e, deleted.Key)
	expired := mustClaim(t, e, prefix+"expired", longTTL)
	complete(t, e, outcome(expired, "expired"), shortTTL(e))
	pass(e, shortTTL(e))

	got := map[string]store.Record{}
	after, pages := "", 0
	for {
		recs, next, err := list(prefix, after, 3)
		if err != nil {
			t.Fatalf("List page %d: %v", pages, err)
		}
		if len(recs) > 3 {
			t.Fatalf("List page %d holds %d records; the limit is 3", pages, len(recs))
		}
		for _, r := range recs {
			if _, dup := got[r.Key]; dup {
				t.Fatalf("List shows %q twice", r.Key)
			}
			got[r.Key] = r
		}
		if pages++; next == "" {
			break
		}
		if pages > 20 {
			t.Fatalf("List has not ended after %d pages of 3 (%d records)", pages, len(got))
		}
		after = next
	}
	if gk, wk := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(gk, wk) {
		t.Fatalf("List under %q shows\n%q\nwant\n%q", prefix, gk, wk)
	}
	for k, w := range want {
		g := got[k]
		if g.State != w.State || g.Fence != w.Fence || g.Fingerprint != w.Fingerprint || lister && string(g.Response) != string(w.Response) ||
			!g.ExpiresAt.Equal(w.ExpiresAt) || !g.CreatedAt.Equal(w.CreatedAt) {
			t.Errorf("List's record of %q:\n%+v\nwant (as Get has it)\n%+v", k, g, w)
		}
	}
	// Bad limits and cursors are refused.
	for _, c := range []struct {
		limit int
		after string
	}{{0, ""}, {store.MaxListLimit + 1, ""}, {1, "!not a cursor!"}} {
		if _, _, err := list(prefix, c.after, c.limit); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("List(limit %d, after %q): %v; want InvalidArgument", c.limit, c.after, err)
		}
	}
}
