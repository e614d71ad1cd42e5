package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
)

// TestGuardTxStepsResumeWithTheirRows runs work of three transactional
// steps (each inserts its order row through Tx inside middleware.Step)
// under guards of four nodes: the first run fails after its second step
// (an error: released, nothing of the outcome stored), and concurrent
// retries on every node then race for the key. The rows match the steps
// exactly: one per step, the first two from the first run, the third from
// the one retry that resumed; every caller gets the same answer.
func TestGuardTxStepsResumeWithTheirRows(t *testing.T) {
	nodes, admin, orders := txCluster(t, 4, fastWaits)
	key := "tx-steps"
	var runs [3]atomic.Int32
	failed := errors.New("the mail server is down")
	work := func(who string, fail bool) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			var got []string
			for i, name := range []string{"reserve", "charge", "email"} {
				if fail && i == 2 {
					return "", failed
				}
				res, err := middleware.Step(ctx, name, func(ctx context.Context) ([]byte, error) {
					runs[i].Add(1)
					if err := insertOrder(ctx, orders, who+":"+name); err != nil {
						return nil, err
					}
					return []byte(who), nil
				})
				if err != nil {
					return "", err
				}
				got = append(got, string(res))
			}
			return fmt.Sprint(got), nil
		}
	}
	if _, _, err := middleware.Do(t.Context(), nodes[0].guard, key, 1, work("first", true)); !errors.Is(err, failed) {
		t.Fatalf("first run: %v", err)
	}
	var wg sync.WaitGroup
	answers := make([]string, 16)
	for i := range answers {
		wg.Go(func() {
			v, _, err := middleware.Do(t.Context(), nodes[i%len(nodes)].guard, key, 1, work(fmt.Sprintf("retry-%d", i), false))
			if err != nil {
				t.Errorf("retry %d: %v", i, err)
			}
			answers[i] = v
		})
	}
	wg.Wait()
	for i, a := range answers {
		if a != answers[0] {
			t.Fatalf("answer %d is %q; want %q like the first", i, a, answers[0])
		}
	}
	rows := orderRows(t, admin, orders, key)
	if len(rows) != 3 || rows[0] != "first:reserve" || rows[1] != "first:charge" || rows[2][len(rows[2])-len(":email"):] != ":email" {
		t.Fatalf("rows %q; want first:reserve, first:charge and one email by a retry", rows)
	}
	if runs[0].Load() != 1 || runs[1].Load() != 1 || runs[2].Load() != 1 {
		t.Fatalf("steps ran %d, %d, %d times; want once each", runs[0].Load(), runs[1].Load(), runs[2].Load())
	}
}

// TestGuardTxStepOfALostClaimLeavesNoRows: a holder whose lease runs out
// in the middle of a slow transactional step (its renewals fail, as when
// it is cut off) while another node takes the key over: the old holder's
// step is refused as a lost lease and its row rolled back; the new holder
// resumes after the last recorded step; the rows are the recorded steps
// exactly.
func TestGuardTxStepOfALostClaimLeavesNoRows(t *testing.T) {
	lease := 300 * time.Millisecond
	nodes, admin, orders := txCluster(t, 2, fastWaits, middleware.WithLeaseTTL(lease))
	key := "tx-step-lost"
	// The old holder's renewals fail from its second step on: its store
	// is wrapped so that Extend is refused, as after a partition.
	old, err := middleware.New(noExtend{nodes[0].store}, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan struct{})
	oldDone := make(chan error, 1)
	go func() {
		_, _, err := middleware.Do(context.Background(), old, key, 1, func(ctx context.Context) (string, error) {
			if _, err := middleware.Step(ctx, "reserve", func(ctx context.Context) ([]byte, error) {
				return []byte("r"), insertOrder(ctx, orders, "old:reserve")
			}); err != nil {
				return "", err
			}
			_, err := middleware.Step(ctx, "charge", func(ctx context.Context) ([]byte, error) {
				if err := insertOrder(ctx, orders, "old:charge"); err != nil {
					return nil, err
				}
				close(slow)
				time.Sleep(4 * lease) // the lease runs out; the key is taken over meanwhile
				return []byte("c"), nil
			})
			return "", err
		})
		oldDone <- err
	}()
	<-slow
	time.Sleep(lease + 100*time.Millisecond)
	var ran []string
	var v string
	v, _, err = middleware.Do(t.Context(), nodes[1].guard, key, 1, func(ctx context.Context) (string, error) {
		for _, name := range []string{"reserve", "charge"} {
			if _, err := middleware.Step(ctx, name, func(ctx context.Context) ([]byte, error) {
				ran = append(ran, name)
				return []byte("new"), insertOrder(ctx, orders, "new:"+name)
			}); err != nil {
				return "", err
			}
		}
		return "done", nil
	})
	if err != nil || v != "done" {
		t.Fatalf("the new holder: %q, %v", v, err)
	}
	if fmt.Sprint(ran) != "[charge]" {
		t.Fatalf("the new holder ran %v; want only charge (reserve was recorded)", ran)
	}
	if err := <-oldDone; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the old holder: %v; want its step refused as a lost lease", err)
	}
	if rows := orderRows(t, admin, orders, key); fmt.Sprint(rows) != "[old:reserve new:charge]" {
		t.Fatalf("rows %q; want old:reserve and new:charge (the old holder's charge rolled back)", rows)
	}
}

// noExtend is a store whose lease extensions fail, as a node cut off from
// the database sees them; everything else is the store's.
type noExtend struct{ *Store }

func (noExtend) Extend(context.Context, string, idemkit.Fence, time.Duration) (time.Time, bool, error) {
	return time.Time{}, false, idemkit.NewError(idemkit.CodeServiceUnavailable, "extend", "cut off", nil)
}
