package middleware_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// BenchmarkExecute measures the guard's own work on the memory backend: a
// first execution (claim, run, complete), a replay (one claim) and a
// replay bound to credentials.
// Each sub-benchmark has a store of its own, so that none fills another's
// (the first executions of a long run reach the store's key limit).
func BenchmarkExecute(b *testing.B) {
	newGuard := func(b *testing.B) *middleware.Guard {
		g, err := middleware.New(memstore.New())
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	body := []byte(`{"order":42,"status":"created"}`)
	fn := func(context.Context) (middleware.Result, error) { return middleware.Result{Value: body}, nil }
	ctx := context.Background()
	b.Run("first", func(b *testing.B) {
		g := newGuard(b)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := g.Execute(ctx, "first-"+strconv.Itoa(i), fpA, fn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		g := newGuard(b)
		if _, err := g.Execute(ctx, "replay", fpA, fn); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if out, err := g.Execute(ctx, "replay", fpA, fn); err != nil || !out.Replayed {
				b.Fatal(out, err)
			}
		}
	})
	// A replay bound to the caller's credentials, as an HTTP request
	// without a scope hook is: the binding's HMAC is the difference.
	b.Run("replay-bound", func(b *testing.B) {
		g := newGuard(b)
		creds := middleware.Credentials("Bearer alice-token", "session=alice")
		if _, err := g.Execute(ctx, "replay-bound", fpA, fn, creds); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if out, err := g.Execute(ctx, "replay-bound", fpA, fn, creds); err != nil || !out.Replayed {
				b.Fatal(out, err)
			}
		}
	})
}
