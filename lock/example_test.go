package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store/memstore"
)

// Do runs a function while holding a lock, renewing the lease while it runs
// and releasing it afterwards. The fence travels with the lease: store it
// beside the data the lock protects and refuse writes carrying an older one.
func ExampleDo() {
	ctx := context.Background()
	locker := newClient()

	var last idemkit.Fence // what the protected resource has seen
	for range 3 {
		err := lock.Do(ctx, locker, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
			fmt.Println("charging; fence newer than the last one seen:", lease.Fence > last)
			last = lease.Fence
			return nil
		})
		if err != nil {
			fmt.Println("error:", err)
		}
	}
	// Output:
	// charging; fence newer than the last one seen: true
	// charging; fence newer than the last one seen: true
	// charging; fence newer than the last one seen: true
}

// When the key stays held, Do gives up after its timeout with an error that
// matches idemkit.ErrAcquisitionTimeout.
func ExampleDo_contention() {
	ctx := context.Background()
	locker := newClient()
	_, _, _ = locker.Acquire(ctx, "report", time.Minute) // someone else holds it

	err := lock.Do(ctx, locker, "report", func(context.Context, lock.Lease) error {
		fmt.Println("never runs")
		return nil
	}, lock.WithTimeout(50*time.Millisecond), lock.WithBackoff(idemkit.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}))
	fmt.Println(errors.Is(err, idemkit.ErrAcquisitionTimeout), idemkit.CodeOf(err))
	// Output:
	// true AcquisitionTimeout
}

// A waiter in Do wakes as soon as the holder releases, and runs next.
func ExampleDo_waiting() {
	ctx := context.Background()
	locker := newClient()
	holder, _, _ := locker.Acquire(ctx, "job", time.Minute)

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lock.Do(ctx, locker, "job", func(_ context.Context, lease lock.Lease) error {
			fmt.Println("second holder runs; its fence is newer:", lease.Fence > holder.Fence)
			return nil
		}, lock.WithTimeout(time.Minute))
	}()
	time.Sleep(20 * time.Millisecond)
	fmt.Println("first holder releases")
	_, _ = locker.Release(ctx, holder.ID)
	<-done
	// Output:
	// first holder releases
	// second holder runs; its fence is newer: true
}

// Acquire returns a Handle whose release happens at most once; a nil handle
// (the lock was held) is safe to use.
func ExampleAcquire() {
	ctx := context.Background()
	locker := newClient()

	h, ok, err := lock.Acquire(ctx, locker, "cron:nightly", 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer h.Close()
	fmt.Println("acquired:", ok)

	h2, ok2, _ := lock.Acquire(ctx, locker, "cron:nightly", 30*time.Second)
	defer h2.Close() // a no-op: h2 is nil
	fmt.Println("second acquire:", ok2, h2 == nil)

	out, _ := h.Release(ctx)
	again, _ := h.Release(ctx)
	fmt.Println("released:", out.OK, "released again:", again.OK)
	// Output:
	// acquired: true
	// second acquire: false true
	// released: true released again: false
}

// WithTelemetry reports every operation, with keys and ids hashed.
func ExampleWithTelemetry() {
	ctx := context.Background()
	report := lock.ReporterFunc(func(r lock.Report) {
		fmt.Printf("%s ok=%v reason=%q raw-key=%q\n", r.Op, r.OK, r.Reason, r.Key)
	})
	locker, err := lock.WithTelemetry(newClient(), report)
	if err != nil {
		panic(err)
	}

	lease, _, _ := locker.Acquire(ctx, "k", time.Second)
	_, _, _ = locker.Acquire(ctx, "k", time.Second)
	_, _ = locker.Release(ctx, lease.ID)
	// Output:
	// acquire ok=true reason="" raw-key=""
	// acquire ok=false reason="locked" raw-key=""
	// release ok=true reason="" raw-key=""
}

// newClient returns a lock client over a fresh in-memory store.
func newClient() *lock.Client {
	c, err := lock.New(memstore.New())
	if err != nil {
		panic(err)
	}
	return c
}
