package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/store"
)

// TestListAcrossScanSteps lists more records than one SCAN step reads, a
// few at a time, on a single node and across a cluster's masters: every
// readable record once; not a record whose key Redis stores hashed (it
// cannot tell its key), nor another application's key of another type
// under the store's prefix.
func TestListAcrossScanSteps(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := b.newClient(t)
			s := newStore(t, c)
			ctx := t.Context()
			const n = 450 // over two SCAN steps' worth on one node
			want := map[string]bool{}
			put := func(k string) {
				rec, ok, err := s.Claim(ctx, k, "fp", time.Minute)
				if err != nil || !ok {
					t.Fatalf("Claim: %v, %v", ok, err)
				}
				rec.State, rec.Response = store.StateCompleted, []byte("r")
				if ok, err := s.Complete(ctx, rec, time.Hour); err != nil || !ok {
					t.Fatalf("Complete: %v, %v", ok, err)
				}
			}
			for i := range n {
				k := fmt.Sprintf("ns:s:k%03d", i)
				put(k)
				want[k] = true
			}
			put("ns:s:" + strings.Repeat("long", 200)) // hashed: over 512 bytes
			if err := c.Set(ctx, prefix(t)+"ns:s:plain-string", "v", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			after := ""
			for pages := 0; ; pages++ {
				recs, next, err := s.List(ctx, "ns:s:", after, 7)
				if err != nil {
					t.Fatalf("List page %d: %v", pages, err)
				}
				if len(recs) > 7 || pages > 2*n {
					t.Fatalf("page %d: %d records", pages, len(recs))
				}
				for _, r := range recs {
					if got[r.Key] || !want[r.Key] {
						t.Fatalf("List shows %q (again, or not one of the readable records)", r.Key)
					}
					got[r.Key] = true
				}
				if next == "" {
					break
				}
				after = next
			}
			if len(got) != n {
				t.Fatalf("List showed %d of the %d records", len(got), n)
			}
		})
	}
}
