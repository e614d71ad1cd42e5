package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestOpContextErrWithoutTimer(t *testing.T) {
	c := newOpContext(context.Background(), time.Now(), 20*time.Millisecond, false)
	defer c.release()
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
		t.Fatalf("Deadline = %v, %v", d, ok)
	}
	time.Sleep(30 * time.Millisecond)
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline: %v; want DeadlineExceeded", err)
	}
	if c.timed.Load() != nil {
		t.Fatal("Err armed a deadline context; only Done may")
	}
}

func TestOpContextDoneAtDeadline(t *testing.T) {
	c := newOpContext(context.Background(), time.Now(), 20*time.Millisecond, false)
	defer c.release()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close at the deadline")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
		t.Fatalf("Err %v, Cause %v; want DeadlineExceeded", c.Err(), context.Cause(c))
	}
	// A context derived from it follows it, as from context.WithDeadline.
	d, cancel := context.WithCancel(c)
	defer cancel()
	if !errors.Is(d.Err(), context.DeadlineExceeded) {
		t.Fatalf("derived Err %v", d.Err())
	}
}

func TestOpContextFollowsParent(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := newOpContext(parent, time.Now(), time.Hour, false)
	defer c.release()
	derived, dcancel := context.WithCancel(c)
	defer dcancel()
	cause := errors.New("client went away")
	cancel(cause)
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err %v; want Canceled", c.Err())
	}
	select {
	case <-derived.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a derived context did not end with the parent")
	}
	if !errors.Is(context.Cause(c), cause) {
		t.Fatalf("Cause %v; want the parent's cause", context.Cause(c))
	}
	early, ecancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer ecancel()
	c2 := newOpContext(early, time.Now(), time.Hour, false)
	defer c2.release()
	if d, _ := c2.Deadline(); time.Until(d) > time.Millisecond {
		t.Fatal("the parent's earlier deadline was not kept")
	}
}

func TestOpContextRelease(t *testing.T) {
	c := newOpContext(context.Background(), time.Now(), time.Hour, false)
	c.release()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err after release: %v; want Canceled", c.Err())
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done after release is not closed")
	}
	waiting := newOpContext(context.Background(), time.Now(), time.Hour, false)
	done := waiting.Done()
	waiting.release()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("release did not end a context someone waited on")
	}
}

func TestOpContextConcurrent(t *testing.T) {
	for range 200 {
		c := newOpContext(context.Background(), time.Now(), time.Millisecond, false)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i {
				case 0:
					<-c.Done()
				case 1:
					_ = c.Err()
				case 2:
					_ = c.Value("k")
				case 3:
					d, cancel := context.WithCancel(c)
					<-d.Done()
					cancel()
				}
			}()
		}
		wg.Wait()
		c.release()
	}
}
