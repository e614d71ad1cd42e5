package main

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
)

// TestList writes records through a real guard in several scopes and
// lists them with the tool on every backend: by scope (none by default),
// by key prefix, in every scope; two at a time, following the printed
// cursor to the end; each with its state, expiry and size; never another
// namespace's records, nor a forgotten one.
func TestList(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		g := e.guard(t)
		var runs atomic.Int32
		for _, c := range []struct{ scope, key, value string }{
			{"", "orders/1", "one"}, {"", "orders/2", "two!"}, {"", "refunds/1", "r"}, {"", "gone", "x"},
			{"tenant:1", "orders/1", "t1"}, {"tenant:1", "orders/2", "t2"}, {"tenant-2", "orders/9", "t9"},
		} {
			if _, err := g.Execute(t.Context(), c.key, order, counted(&runs, middleware.Result{Value: []byte(c.value)}),
				middleware.Scope(c.scope), middleware.RecordTTL(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := g.Forget(t.Context(), "", "gone"); err != nil {
			t.Fatal(err)
		}
		// Another namespace's record, which no listing of e.ns shows.
		other, err := middleware.New(e.store, middleware.WithNamespace(e.ns+"x"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Execute(t.Context(), "orders/1", order, counted(&runs, middleware.Result{Value: []byte("o")})); err != nil {
			t.Fatal(err)
		}

		// list follows the cursor to the end and returns "scope|key|size".
		list := func(args ...string) []string {
			t.Helper()
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				more := append([]string{"-limit", "2"}, args...)
				if after != "" {
					more = append(more, "-after", after)
				}
				m := jsonObject(t, e.args("list", more...)...)
				recs, _ := m["records"].([]any)
				if len(recs) > 2 || pages > 10 {
					t.Fatalf("page %d of list %v: %v", pages, args, m)
				}
				for _, r := range recs {
					r := r.(map[string]any)
					expires, err := time.Parse(time.RFC3339Nano, r["expires"].(string))
					if r["state"] != "completed" || err != nil || time.Until(expires) < 50*time.Minute ||
						r["record_key"] != e.ns+":"+strings.ReplaceAll(r["scope"].(string), ":", "%3A")+":"+r["key"].(string) {
						t.Fatalf("a listed record: %v", r)
					}
					got = append(got, fmt.Sprint(r["scope"], "|", r["key"], "|", r["size"]))
				}
				next, _ := m["next"].(string)
				if next == "" {
					slices.Sort(got)
					return got
				}
				after = next
			}
		}
		for _, c := range []struct {
			args []string
			want []string
		}{
			{nil, []string{"|orders/1|3", "|orders/2|4", "|refunds/1|1"}},
			{[]string{"-key-prefix", "orders/"}, []string{"|orders/1|3", "|orders/2|4"}},
			{[]string{"-scope", "tenant:1"}, []string{"tenant:1|orders/1|2", "tenant:1|orders/2|2"}},
			{[]string{"-scope", "tenant:1", "-key-prefix", "orders/2"}, []string{"tenant:1|orders/2|2"}},
			{[]string{"-all-scopes"}, []string{"tenant-2|orders/9|2", "tenant:1|orders/1|2", "tenant:1|orders/2|2", "|orders/1|3", "|orders/2|4", "|refunds/1|1"}},
		} {
			want := slices.Sorted(slices.Values(c.want))
			if got := list(c.args...); !slices.Equal(got, want) {
				t.Errorf("list %v: %q; want %q", c.args, got, want)
			}
		}

		// The text form: a table, and how to go on.
		r := tool(t, e.args("list", "-scope", "tenant:1", "-limit", "1")...)
		if r.code != exitOK || !strings.Contains(r.stdout, "STATE") || !strings.Contains(r.stdout, "completed") ||
			!strings.Contains(r.stdout, "tenant:1") || !strings.Contains(r.stdout, "more may follow: add -after ") {
			t.Fatalf("list: exit %d, stdout:\n%s\nstderr %q", r.code, r.stdout, r.stderr)
		}
		next := r.stdout[strings.LastIndex(r.stdout, "-after ")+len("-after "):]
		r2 := tool(t, e.args("list", "-scope", "tenant:1", "-limit", "1", "-after", strings.TrimSpace(next))...)
		if r2.code != exitOK || r2.stdout == r.stdout || !strings.Contains(r2.stdout, "tenant:1") {
			t.Fatalf("the second page: exit %d, stdout:\n%s\nstderr %q", r2.code, r2.stdout, r2.stderr)
		}
		if r := tool(t, e.args("list", "-after", "!bad!")...); r.code != exitUsage || !strings.Contains(r.stderr, "cursor") {
			t.Fatalf("list with a bad cursor: exit %d, stderr %q; want 2", r.code, r.stderr)
		}
	})
}
