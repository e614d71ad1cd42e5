package middleware_test

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestList: List shows the live records of one scope (escaped ':' and '%'
// included), of every scope, or of the keys with a prefix, with their
// scope, key and state, a page at a time; it never shows another
// namespace's records, nor one forgotten.
func TestList(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	g := newGuard(t, s, middleware.WithRecordTTL(time.Hour))
	other := newGuard(t, s, middleware.WithNamespace("other"))
	var runs atomic.Int32
	for _, c := range []struct{ scope, key string }{
		{"", "a/1"}, {"", "a/2"}, {"", "b"}, {"t:1%", "a/1"}, {"t:1%", "c"}, {"t", "a/9"},
	} {
		if _, err := g.Execute(ctx, c.key, fpA, value(&runs, "v"), middleware.Scope(c.scope)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Execute(ctx, "a/1", fpA, value(&runs, "v")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Forget(ctx, "", "b"); err != nil {
		t.Fatal(err)
	}
	// list returns "scope|key" of every record the query lists, one page
	// of limit at a time.
	list := func(q middleware.ListQuery) []string {
		t.Helper()
		var got []string
		for pages := 0; ; pages++ {
			l, err := g.List(ctx, q)
			if err != nil {
				t.Fatalf("List(%+v): %v", q, err)
			}
			if q.Limit > 0 && len(l.Records) > q.Limit {
				t.Fatalf("a page of %d records; the limit is %d", len(l.Records), q.Limit)
			}
			for _, in := range l.Records {
				if in.State != store.StateCompleted || in.Algorithm != "http-v2" || in.Size != 1 || in.Response != nil ||
					in.RecordKey != "idempotency:"+strings.NewReplacer("%", "%25", ":", "%3A").Replace(in.Scope)+":"+in.Key {
					t.Fatalf("a listed record: %+v", in)
				}
				got = append(got, in.Scope+"|"+in.Key)
			}
			if l.Next == "" {
				slices.Sort(got)
				return got
			}
			q.After = l.Next
		}
	}
	for _, c := range []struct {
		q    middleware.ListQuery
		want []string
	}{
		{middleware.ListQuery{}, []string{"|a/1", "|a/2"}},
		{middleware.ListQuery{Scope: "t:1%"}, []string{"t:1%|a/1", "t:1%|c"}},
		{middleware.ListQuery{Scope: "t:1%", KeyPrefix: "a/"}, []string{"t:1%|a/1"}},
		{middleware.ListQuery{KeyPrefix: "a/", Limit: 1}, []string{"|a/1", "|a/2"}},
		{middleware.ListQuery{AllScopes: true, Limit: 2}, []string{"t:1%|a/1", "t:1%|c", "t|a/9", "|a/1", "|a/2"}},
	} {
		want := slices.Sorted(slices.Values(c.want))
		if got := list(c.q); !slices.Equal(got, want) {
			t.Errorf("List(%+v) = %q; want %q", c.q, got, want)
		}
	}
	for _, q := range []middleware.ListQuery{{AllScopes: true, Scope: "t"}, {AllScopes: true, KeyPrefix: "a"}, {Limit: store.MaxListLimit + 1}, {After: "?"}} {
		if _, err := g.List(ctx, q); !errors.Is(err, idemkit.ErrInvalidArgument) {
			t.Errorf("List(%+v): %v; want InvalidArgument", q, err)
		}
	}
}
