package firestorelock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// TestStalledServer freezes an emulator of the test's own (SIGSTOP: the
// connection stays open, nothing is answered) and checks that every
// operation given a ctx deadline returns a coded timeout within it (with a
// generous bound for a busy machine), never hangs; and that the locker
// works again once the emulator resumes.
func TestStalledServer(t *testing.T) {
	t.Parallel()
	e := testenv.NewFirestore(t)
	l, err := firestorelock.New(dial(t, e.Host, "stalled"))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, l)
	lease := acquireOK(t, l, "held", time.Hour)
	expired := acquireOK(t, l, "expired", time.Millisecond)
	outlive(expired.ExpiresAt)

	resume := e.Stall(t)
	const deadline = time.Second
	ops := map[string]func(ctx context.Context) error{
		"acquire-free":    func(ctx context.Context) error { _, _, err := l.Acquire(ctx, "free", time.Minute); return err },
		"acquire-expired": func(ctx context.Context) error { _, _, err := l.Acquire(ctx, "expired", time.Minute); return err },
		"release":         func(ctx context.Context) error { _, err := l.Release(ctx, lease.ID); return err },
		"release-key":     func(ctx context.Context) error { _, err := l.ReleaseKey(ctx, "held", lease.ID); return err },
		"extend":          func(ctx context.Context) error { _, err := l.Extend(ctx, lease.ID, time.Hour); return err },
		"extend-key":      func(ctx context.Context) error { _, err := l.ExtendKey(ctx, "held", lease.ID, time.Hour); return err },
		"is-locked":       func(ctx context.Context) error { _, err := l.IsLocked(ctx, "held"); return err },
		"lookup-key":      func(ctx context.Context) error { _, _, err := l.LookupKey(ctx, "held"); return err },
		"lookup-id":       func(ctx context.Context) error { _, _, err := l.LookupID(ctx, lease.ID); return err },
		"sweep":           func(ctx context.Context) error { _, err := l.Sweep(ctx); return err },
		"do": func(ctx context.Context) error {
			return lock.Do(ctx, l, "do", func(context.Context, lock.Lease) error { return nil })
		},
	}
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			err := op(ctx)
			took := time.Since(start)
			switch idemkit.CodeOf(err) {
			case idemkit.CodeNetworkTimeout, idemkit.CodeServiceUnavailable, idemkit.CodeAcquisitionTimeout:
			default:
				t.Errorf("%s on a stalled server: %v; want a coded timeout", name, err)
			}
			if took > deadline+2*time.Second {
				t.Errorf("%s took %v on a stalled server; want it bounded by its deadline %v", name, took, deadline)
			}
		}()
	}
	wg.Wait()

	resume()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if locked, err := l.IsLocked(ctx, "held"); err != nil || !locked {
		t.Fatalf("IsLocked after the resume = %v, %v; want the held lease", locked, err)
	}
	if out, err := l.ReleaseKey(ctx, "held", lease.ID); err != nil || !out.OK {
		t.Fatalf("ReleaseKey after the resume = %+v, %v", out, err)
	}
}
