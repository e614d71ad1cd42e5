package pgstore

import (
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// TestListStoredForms: List finds keys stored verbatim and in hex under
// any prefix: an ASCII prefix matches both forms, a non-ASCII one (a
// tenant's name in Cyrillic) the hex ones, a prefix starting with \x the
// hex-stored keys that start with those characters, never a verbatim key
// that looks like hex; in the order of the stored keys, a page at a time.
func TestListStoredForms(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	pool := newPool(t, srv.URL, 4)
	s, err := New(pool, table(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	keys := []string{"a:1", "a:\u043a", "a:\x00", "\u043a\u043b:1", "\u043a\u043b:2", "\u043a\u043b\u044e", `\x61:1`, "\\", "b:1"}
	for _, k := range keys {
		rec, ok, err := s.Claim(ctx, k, "fp", time.Minute)
		if err != nil || !ok {
			t.Fatalf("Claim(%q): %v, %v", k, ok, err)
		}
		rec.State, rec.Response = store.StateCompleted, []byte("r")
		if ok, err := s.Complete(ctx, rec, time.Hour); err != nil || !ok {
			t.Fatalf("Complete(%q): %v, %v", k, ok, err)
		}
	}
	list := func(prefix string) []string {
		var got []string
		after := ""
		for pages := 0; pages < 20; pages++ {
			recs, next, err := s.List(ctx, prefix, after, 2)
			if err != nil {
				t.Fatalf("List(%q): %v", prefix, err)
			}
			for _, r := range recs {
				got = append(got, r.Key)
			}
			if next == "" {
				return got
			}
			after = next
		}
		t.Fatalf("List(%q) does not end", prefix)
		return nil
	}
	for prefix, want := range map[string][]string{
		"a:":                 {"a:\x00", "a:\u043a", "a:1"}, // by stored key: \x6… (hex) sorts before a:
		"\u043a\u043b:":      {"\u043a\u043b:1", "\u043a\u043b:2"},
		`\x`:                 {`\x61:1`},
		`\`:                  {"\\", `\x61:1`},
		"":                   {"\\", `\x61:1`, "a:\x00", "a:\u043a", "\u043a\u043b:1", "\u043a\u043b:2", "\u043a\u043b\u044e", "a:1", "b:1"},
		"\u043a\u043b\u044e": {"\u043a\u043b\u044e"},
		"c":                  nil,
	} {
		got := list(prefix)
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q; want %q", prefix, got, want)
		}
	}
}
