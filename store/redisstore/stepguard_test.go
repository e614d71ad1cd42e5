package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/redisstore"
)

// TestStepsThroughGuard, on a single node and on the cluster: a step costs
// the guard one round trip (a first execution of three steps is 2 + 3
// round trips), a retry of work that failed after two steps takes the key
// over with its steps in its claim's round trips and runs only the third;
// and a holder whose lease ran out in the middle of a slow step (its
// renewals failing, as when it is cut off) while a guard on another client
// took the key over has its step refused by the store (the record carries
// the new claim), while the new holder resumed after the last recorded
// step.
func TestStepsThroughGuard(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			c := b.newClient(t)
			g := newGuard(t, c)
			if err := c.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			var n counter
			c.AddHook(&n)
			ran := map[string]int{}
			failed := errors.New("the mail server is down")
			work := func(fail bool) middleware.Func {
				return func(ctx context.Context) (middleware.Result, error) {
					for i, name := range []string{"reserve", "charge", "email"} {
						if fail && i == 2 {
							return middleware.Result{}, failed
						}
						if _, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
							ran[name]++
							return []byte(name), nil
						}); err != nil {
							return middleware.Result{}, err
						}
					}
					return middleware.Result{Value: []byte("done")}, nil
				}
			}
			before := n.count()
			if out, err := g.Execute(t.Context(), "steps-trips", fp, work(false)); err != nil || !out.Recorded {
				t.Fatalf("first execution: %+v, %v", out, err)
			}
			if trips := n.count() - before; trips != 5 {
				t.Fatalf("a first execution of three steps took %d round trips; want 2 + 3", trips)
			}
			if _, err := g.Execute(t.Context(), "steps-resume", fp, work(true)); !errors.Is(err, failed) {
				t.Fatalf("the failing run: %v", err)
			}
			clear(ran)
			if out, err := g.Execute(t.Context(), "steps-resume", fp, work(false)); err != nil || string(out.Value) != "done" {
				t.Fatalf("the retry: %+v, %v", out, err)
			}
			if fmt.Sprint(ran) != "map[email:1]" {
				t.Fatalf("the retry ran %v; want only the email", ran)
			}

			// Lease lost in the middle of a step.
			lease := 300 * time.Millisecond
			old, err := middleware.New(noExtend{newStore(t, c)}, middleware.WithLeaseTTL(lease))
			if err != nil {
				t.Fatal(err)
			}
			slow := make(chan struct{})
			oldDone := make(chan error, 1)
			go func() {
				_, err := old.Execute(context.Background(), "steps-lost", fp, func(ctx context.Context) (middleware.Result, error) {
					if _, err := middleware.Step(ctx, "reserve", func(context.Context) ([]byte, error) { return []byte("old"), nil }); err != nil {
						return middleware.Result{}, err
					}
					_, err := middleware.Step(ctx, "charge", func(context.Context) ([]byte, error) {
						close(slow)
						time.Sleep(4 * lease) // the lease runs out; the key is taken over meanwhile
						return []byte("old"), nil
					})
					return middleware.Result{}, err
				})
				oldDone <- err
			}()
			<-slow
			time.Sleep(lease + 100*time.Millisecond)
			clear(ran)
			out, err := newGuard(t, c, middleware.WithLeaseTTL(lease)).Execute(t.Context(), "steps-lost", fp, func(ctx context.Context) (middleware.Result, error) {
				var got []string
				for _, name := range []string{"reserve", "charge"} {
					res, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
						ran[name]++
						return []byte("new"), nil
					})
					if err != nil {
						return middleware.Result{}, err
					}
					got = append(got, string(res))
				}
				return middleware.Result{Value: fmt.Append(nil, got)}, nil
			})
			if err != nil || string(out.Value) != "[old new]" || fmt.Sprint(ran) != "map[charge:1]" {
				t.Fatalf("the new holder: %q, %v, ran %v; want the old reserve and its own charge", out.Value, err, ran)
			}
			if err := <-oldDone; !errors.Is(err, idemkit.ErrLeaseLost) {
				t.Fatalf("the old holder: %v; want its step refused as a lost lease", err)
			}
		})
	}
}

// noExtend is a store whose lease extensions fail, as a holder cut off
// from the server sees them; everything else is the store's.
type noExtend struct{ *redisstore.Store }

func (noExtend) Extend(context.Context, string, idemkit.Fence, time.Duration) (time.Time, bool, error) {
	return time.Time{}, false, idemkit.NewError(idemkit.CodeServiceUnavailable, "extend", "cut off", nil)
}
