package memlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/lock/memlock"
)

// A memlock.Locker behaves like the distributed backends: one attempt per
// Acquire, fences that grow, release by lock id. A fence is the clock in
// Unix milliseconds, or one more than the key's last fence when that is
// greater (here the clock stands still).
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := memlock.New(memlock.WithClock(func() time.Time { return now }))

	a, ok, _ := l.Acquire(ctx, "orders:1", 10*time.Second)
	fmt.Println("first:", ok, a.Fence)

	_, ok, _ = l.Acquire(ctx, "orders:1", 10*time.Second)
	fmt.Println("second while held:", ok)

	out, _ := l.Release(ctx, a.ID)
	fmt.Println("released:", out.OK)

	b, ok, _ := l.Acquire(ctx, "orders:1", 10*time.Second)
	fmt.Println("third:", ok, b.Fence)
	// Output:
	// first: true 001767225600000
	// second while held: false
	// released: true
	// third: true 001767225600001
}

// An injected clock steps across the expiry exactly: a lease is live while
// now < ExpiresAt.
func ExampleWithClock() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := memlock.New(memlock.WithClock(func() time.Time { return now }))

	_, _, _ = l.Acquire(ctx, "k", time.Second)
	now = now.Add(time.Second - time.Millisecond)
	live, _ := l.IsLocked(ctx, "k")
	fmt.Println("at expiry − 1ms:", live)
	now = now.Add(time.Millisecond)
	live, _ = l.IsLocked(ctx, "k")
	fmt.Println("at expiry:", live)
	// Output:
	// at expiry − 1ms: true
	// at expiry: false
}
