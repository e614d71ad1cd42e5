package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/redis/go-redis/v9"
)

// hookFunc collects guard events.
type hookFunc func(middleware.Event)

func (f hookFunc) IdempotencyEvent(e middleware.Event) { f(e) }

// counting is fn work that counts its executions.
func counting(runs *atomic.Int32, v string) middleware.Func {
	return func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(v)}, nil
	}
}

// TestServerKilledWhileFnRuns: the Redis server dies (SIGKILL) while a
// guarded request holds the lock and runs fn. A duplicate meanwhile is told
// the backend is unavailable (the guard cannot tell whether fn ran) and
// never runs fn. The first request's record write fails and is retried
// while the lease is renewed; the server comes back with its AOF (the
// lease and the fence are still there), the write lands, and retries replay.
// fn runs once in all.
func TestServerKilledWhileFnRuns(t *testing.T) {
	srv := testenv.NewRedis(t)
	newClient := func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: time.Second, MaxRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	backendErrors := make(chan middleware.Event, 100)
	opts := []middleware.Option{
		middleware.WithWaitBudget(0), middleware.WithLockTTL(20 * time.Second),
		middleware.WithRecordWriteTimeout(2 * time.Minute), middleware.WithOpTimeout(2 * time.Second),
		middleware.WithBaseDelay(20 * time.Millisecond), middleware.WithMaxDelay(200 * time.Millisecond),
	}
	prefix := testenv.Name(t)
	first := newNode(t, newClient, prefix, true, append(opts, middleware.WithHook(hookFunc(func(e middleware.Event) {
		if e.Kind == middleware.EventBackendError {
			select {
			case backendErrors <- e:
			default:
			}
		}
	})))...)
	other := newNode(t, newClient, prefix, true, opts...)

	var runs atomic.Int32
	started, gate := make(chan struct{}), make(chan struct{})
	type result struct {
		out middleware.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := first.guard.Execute(context.Background(), "order-1", fp, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			close(started)
			<-gate
			return middleware.Result{Value: []byte("receipt")}, nil
		})
		done <- result{out, err}
	}()
	<-started
	srv.Stop(t)

	if _, err := other.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "second")); !errors.Is(err, middleware.ErrUnavailable) {
		t.Fatalf("a duplicate while the server is down: %v; want ErrUnavailable", err)
	}
	close(gate) // fn returns; its record cannot be written yet
	select {
	case <-backendErrors: // the record write failed at least once
	case <-time.After(time.Minute):
		t.Fatal("the guard reported no failed record write while the server was down")
	}
	srv.Start(t)

	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the first request never finished")
	}
	if r.err != nil || string(r.out.Value) != "receipt" {
		t.Fatalf("the first request: %+v, %v", r.out, r.err)
	}
	out, err := other.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "second"))
	if r.out.Recorded {
		if err != nil || !out.Replayed || string(out.Value) != "receipt" {
			t.Fatalf("a retry after the record landed: %+v, %v; want the replay", out, err)
		}
	} else if !errors.Is(err, middleware.ErrInProgress) && !(err == nil && out.Replayed) {
		// The record could not be written before the lease was lost: the
		// lock is left to run out, and until then retries are refused.
		t.Fatalf("a retry after an unrecorded execution: %+v, %v; want in progress", out, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times; want 1", n)
	}
	t.Logf("first execution recorded after the restart: %v", r.out.Recorded)
}

// lostReply is a client hook that lets the server run the first command (or
// pipeline) that match selects, then reports failure to the caller as if
// the reply had been lost: first cancelling ctx (when cancel is set), else
// with a broken connection.
type lostReply struct {
	match  func(args []any) bool
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.match(cmd.Args()) && h.fired.CompareAndSwap(false, true) {
			err = h.lose()
			cmd.SetErr(err)
		}
		return err
	}
}

func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && len(cmds) > 0 && h.match(cmds[0].Args()) && h.fired.CompareAndSwap(false, true) {
			err = h.lose()
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
}

func (h *lostReply) lose() error {
	if h.cancel != nil {
		h.cancel()
		return context.Canceled
	}
	return io.ErrUnexpectedEOF
}

// script reports whether args run a script with n keys.
func script(n int) func(args []any) bool {
	return func(args []any) bool {
		return len(args) > 2 && (args[0] == "evalsha" || args[0] == "eval") && fmt.Sprint(args[2]) == fmt.Sprint(n)
	}
}

// TestLostReplies: a request whose ctx is cancelled, or whose connection
// breaks, after the server ran one of the guard's scripts but before the
// reply arrived. fn never runs twice and no record is lost.
func TestLostReplies(t *testing.T) {
	for _, b := range redistest.Backends() {
		t.Run(b.Name+"/acquire", func(t *testing.T) {
			// The caller goes away while its acquire-and-read script runs:
			// the lock was taken but nobody knows its lease. The call fails
			// (aborted) without running fn; duplicates are refused until
			// the lease runs out, and then one runs fn.
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			hook := &lostReply{match: script(4), cancel: cancel}
			hooked := func(t testing.TB) redis.UniversalClient {
				c := b.NewClient(t)
				c.AddHook(hook)
				return c
			}
			prefix := testenv.Name(t)
			opts := []middleware.Option{middleware.WithLockTTL(time.Second), middleware.WithWaitBudget(0),
				middleware.WithLockRetries(100000), middleware.WithMaxDelay(50 * time.Millisecond)}
			a := newNode(t, hooked, prefix, true, opts...)
			other := newNode(t, b.NewClient, prefix, true, opts...)
			var runs atomic.Int32
			_, err := a.guard.Execute(ctx, "order-1", fp, counting(&runs, "a"))
			if !hook.fired.Load() || !errors.Is(err, idemkit.ErrAborted) {
				t.Fatalf("the aborted request: %v (fault fired: %v); want Aborted", err, hook.fired.Load())
			}
			if runs.Load() != 0 {
				t.Fatal("fn ran although the acquire's reply was lost")
			}
			out, err := other.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "b"))
			if err != nil && !errors.Is(err, middleware.ErrInProgress) {
				t.Fatalf("a duplicate while the orphaned lease lives: %v", err)
			}
			out, err = other.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "b"), middleware.WaitBudget(time.Minute))
			if err != nil || string(out.Value) != "b" {
				t.Fatalf("a retry after the orphaned lease: %+v, %v", out, err)
			}
			out, err = a.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "a"))
			if err != nil || !out.Replayed || string(out.Value) != "b" {
				t.Fatalf("a last retry: %+v, %v; want the replay", out, err)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("fn ran %d times; want 1", n)
			}
		})
		t.Run(b.Name+"/put-release", func(t *testing.T) {
			// The connection breaks after the put-and-release script ran:
			// the guard falls back to a separate put (the same fence is
			// accepted again) and release, and the outcome is recorded.
			hook := &lostReply{match: script(2)}
			hooked := func(t testing.TB) redis.UniversalClient {
				c := b.NewClient(t)
				c.AddHook(hook)
				return c
			}
			a := newNode(t, hooked, testenv.Name(t), true)
			var runs atomic.Int32
			out, err := a.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "a"))
			if err != nil || !out.Recorded || !hook.fired.Load() {
				t.Fatalf("first: %+v, %v (fault fired: %v); want recorded", out, err, hook.fired.Load())
			}
			out, err = a.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "again"))
			if err != nil || !out.Replayed || string(out.Value) != "a" || runs.Load() != 1 {
				t.Fatalf("retry: %+v, %v, %d runs; want the replay of the one run", out, err, runs.Load())
			}
		})
		t.Run(b.Name+"/cancelled-during-fn", func(t *testing.T) {
			// The caller goes away while fn runs and fn completes anyway:
			// the record is written on a detached context.
			a := newNode(t, b.NewClient, testenv.Name(t), true)
			ctx, cancel := context.WithCancel(t.Context())
			var runs atomic.Int32
			var once sync.Once
			out, err := a.guard.Execute(ctx, "order-1", fp, func(context.Context) (middleware.Result, error) {
				runs.Add(1)
				once.Do(cancel)
				return middleware.Result{Value: []byte("done")}, nil
			})
			if err != nil || !out.Recorded {
				t.Fatalf("first: %+v, %v; want recorded", out, err)
			}
			out, err = a.guard.Execute(t.Context(), "order-1", fp, counting(&runs, "again"))
			if err != nil || !out.Replayed || string(out.Value) != "done" || runs.Load() != 1 {
				t.Fatalf("retry: %+v, %v, %d runs", out, err, runs.Load())
			}
		})
	}
}
