package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/dynamostore"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newGuard returns a guard on a store of its own on client.
func newGuard(t testing.TB, client *dynamodb.Client, table dynamostore.Option, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(newStore(t, client, table), append([]middleware.Option{middleware.WithLogger(discard())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// answer is work that answers body and counts its runs.
func answer(runs *atomic.Int32, body string) middleware.Func {
	return func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(body)}, nil
	}
}

func fpOf(s string) fingerprint.Fingerprint {
	return fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/" + s})
}

// TestExactlyOnceAcrossNodes races 16 goroutines over 3 guards, each with
// a DynamoDB client of its own (its own HTTP connections, as a separate
// process would have) and its own Store, on one key, 5 times with fresh
// keys (guardtest.ExactlyOnce): every time the work runs exactly once, and
// every other caller gets its response replayed (or, past the wait
// budget, is told the request is in progress). Waiters poll: DynamoDB
// cannot notify.
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	url := testenv.Dynamo(t).URL
	admin, _ := newClient(t, url)
	table, _ := newTable(t, admin)
	guards := make([]*middleware.Guard, 3)
	for i := range guards {
		client, _ := newClient(t, url)
		guards[i] = newGuard(t, client, table, middleware.WithWaitBudget(30*time.Second), middleware.WithOpTimeout(20*time.Second))
	}
	st := guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 16, Rounds: 5, KeyPrefix: "order-", InProgressOK: true, MaxWork: 50 * time.Millisecond})
	t.Logf("%+v", st)
}

// TestGuardRoundTrips counts the requests a guard sends, with an event
// hook and without: a first execution is the claim's PutItem and the
// completion's PutItem; a replay is the claim's refused PutItem and, on
// dynalite, which sends no item back with a refusal, a GetItem (DynamoDB
// sends it back: one request there).
func TestGuardRoundTrips(t *testing.T) {
	t.Parallel()
	for _, hook := range []bool{false, true} {
		t.Run(fmt.Sprint("hook=", hook), func(t *testing.T) {
			t.Parallel()
			client, c := newClient(t, testenv.Dynamo(t).URL)
			table, _ := newTable(t, client)
			var events atomic.Int32
			var opts []middleware.Option
			if hook {
				opts = append(opts, middleware.WithHook(middleware.HookFunc(func(context.Context, middleware.Event) { events.Add(1) })))
			}
			g := newGuard(t, client, table, opts...)
			fp := fingerprint.New("test", [32]byte{2})
			var runs atomic.Int32
			c.take()
			out, err := g.Execute(t.Context(), "order-1", fp, answer(&runs, "ok"))
			if err != nil || out.Replayed || !out.Recorded {
				t.Fatalf("first execution: %+v, %v", out, err)
			}
			first, firstBy := c.take()
			out, err = g.Execute(t.Context(), "order-1", fp, answer(&runs, "again"))
			if err != nil || !out.Replayed || string(out.Value) != "ok" {
				t.Fatalf("retry: %+v, %v; want the replay", out, err)
			}
			replay, replayBy := c.take()
			t.Logf("first execution: %d requests (%s); replay: %d (%s)", first, firstBy, replay, replayBy)
			if want := "PutItem=2"; first != 2 || firstBy != want {
				t.Errorf("first execution: %d requests (%s); want 2 (%s)", first, firstBy, want)
			}
			if want := "GetItem=1 PutItem=1"; replay != 2 || replayBy != want {
				t.Errorf("replay: %d requests (%s); want 2 on dynalite (%s)", replay, replayBy, want)
			}
			if hook && events.Load() != 2 {
				t.Errorf("the hook saw %d events; want 2", events.Load())
			}
			if runs.Load() != 1 {
				t.Errorf("the work ran %d times", runs.Load())
			}
		})
	}
}

// TestStalledServerThroughHTTP: with the server frozen (SIGSTOP), a
// request through nethttp is answered 503 with Retry-After within the op
// timeout, never a hang, and the handler does not run; once the server is
// back, the same key executes.
func TestStalledServerThroughHTTP(t *testing.T) {
	t.Parallel()
	srv := testenv.NewDynamo(t)
	client, _ := newClient(t, srv.URL)
	table, _ := newTable(t, client)
	const opTimeout = time.Second
	url := guardtest.Serve(t, newGuard(t, client, table, middleware.WithOpTimeout(opTimeout)))
	if a := guardtest.Post(t, url, "warm"); a.Status != http.StatusCreated {
		t.Fatalf("before the stall: %+v", a)
	}
	resume := srv.Stall(t)
	start := time.Now()
	a := guardtest.Post(t, url, "stalled")
	took := time.Since(start)
	resume()
	if a.Status != http.StatusServiceUnavailable || a.RetryAfter == "" {
		t.Fatalf("a request on a stalled server: %+v; want 503 with Retry-After", a)
	}
	if took > opTimeout+2*time.Second {
		t.Fatalf("a request on a stalled server took %v with a %v op timeout", took, opTimeout)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := guardtest.Post(t, url, "stalled")
		if a.Status == http.StatusCreated {
			break
		}
		// A claim sent before the stall may land when the server resumes
		// and hold the key until its lease ends: busy, never a second run.
		if time.Now().After(deadline) || (a.Status != http.StatusConflict && a.Status != http.StatusServiceUnavailable) {
			t.Fatalf("after the server came back: %+v", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKilledServerUnderRunningService: a service whose DynamoDB endpoint
// is killed answers every request 503 with Retry-After, and its guard logs
// why once (per cause), not once per request; once the server is started
// again (its tables kept), the service answers again and replays what it
// recorded before.
func TestKilledServerUnderRunningService(t *testing.T) {
	t.Parallel()
	srv := testenv.NewDynamo(t)
	client, _ := newClient(t, srv.URL)
	table, _ := newTable(t, client)
	var log guardtest.Log
	g, err := middleware.New(newStore(t, client, table), middleware.WithLogger(log.Logger()), middleware.WithOpTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	url := guardtest.Serve(t, g)
	if a := guardtest.Post(t, url, "before"); a.Status != http.StatusCreated {
		t.Fatalf("before the kill: %+v", a)
	}
	srv.Stop(t)
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 10, Status: http.StatusServiceUnavailable, Kind: "idempotency-unavailable",
		Code: "ServiceUnavailable", Words: []string{"DynamoDB"},
	})
	srv.Start(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := guardtest.Post(t, url, "after")
		if a.Status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %+v", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := guardtest.Post(t, url, "before"); a.Status != http.StatusCreated || a.Body != `{"id":"ord_1"}` {
		t.Fatalf("the replay of a key recorded before the kill: %+v", a)
	}
}

// TestFailover kills the server (SIGKILL) three times under load and
// starts it again on its data: two guards with clients of their own send
// every key, each retrying until it has the outcome, as clients retrying
// a request do. Keys complete again after each restart, no key's work
// runs twice, and every key a call completed replays its outcome after.
func TestFailover(t *testing.T) {
	t.Parallel()
	srv := testenv.NewDynamo(t)
	admin, _ := newClient(t, srv.URL)
	table, _ := newTable(t, admin)
	guards := make([]*middleware.Guard, 2)
	for i := range guards {
		client, _ := newClient(t, srv.URL)
		// The record write timeout outlasts a restart: work that ran
		// while the server died is recorded once it is back.
		guards[i] = newGuard(t, client, table, middleware.WithOpTimeout(2*time.Second), middleware.WithRecordWriteTimeout(30*time.Second),
			middleware.WithLeaseTTL(5*time.Second), middleware.WithWaitBudget(time.Second))
	}
	var (
		runs      sync.Map // key → *atomic.Int32
		done      sync.Map // keys a call completed
		successes atomic.Int64
		failures  atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	storm := func(key string) {
		n := new(atomic.Int32)
		runs.Store(key, n)
		var kwg sync.WaitGroup
		for _, g := range guards {
			kwg.Go(func() {
				for {
					out, err := g.Execute(t.Context(), key, fpOf("orders"), func(context.Context) (middleware.Result, error) {
						n.Add(1)
						time.Sleep(20 * time.Millisecond)
						return middleware.Result{Value: []byte("done " + key)}, nil
					})
					if err == nil && string(out.Value) == "done "+key {
						done.Store(key, true)
						successes.Add(1)
						return
					}
					failures.Add(1)
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			})
		}
		kwg.Wait()
	}
	for w := range 4 {
		wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				storm(fmt.Sprintf("order-%d-%d", w, seq))
			}
		})
	}
	progress := func(after int64) bool {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if successes.Load() > after {
				return true
			}
		}
		return false
	}
	if !progress(0) {
		t.Fatal("no key completed before the first kill")
	}
	const kills = 3
	for i := range kills {
		time.Sleep(300 * time.Millisecond) // keys in flight when the server dies
		before := successes.Load()
		srv.Restart(t)
		if !progress(before) {
			t.Fatalf("no key completed within 60 s of restart %d", i+1)
		}
	}
	close(stop)
	wg.Wait()

	check := newGuard(t, admin, table)
	keys, twice, lost := 0, 0, 0
	done.Range(func(k, _ any) bool {
		keys++
		out, err := check.Execute(t.Context(), k.(string), fpOf("orders"), func(context.Context) (middleware.Result, error) {
			return middleware.Result{}, errors.New("the work ran again")
		})
		if err != nil || !out.Replayed || string(out.Value) != "done "+k.(string) {
			lost++
			t.Errorf("%s after the kills: %+v, %v; want its replay", k, out, err)
		}
		return true
	})
	runs.Range(func(k, n any) bool {
		if n.(*atomic.Int32).Load() > 1 {
			twice++
			t.Errorf("%s: the work ran %d times", k, n.(*atomic.Int32).Load())
		}
		return true
	})
	t.Logf("%d kills: %d keys completed, %d calls failed and were retried, %d keys executed twice, %d completed records lost",
		kills, keys, failures.Load(), twice, lost)
	if keys == 0 {
		t.Fatal("no key completed")
	}
}

// TestGuardCheck: the startup check passes on a good setup, names the fix
// (Misconfigured) on a missing table, and fails with a transient code when
// nothing listens where the client dials.
func TestGuardCheck(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	table, _ := newTable(t, client)
	if err := newGuard(t, client, table).Check(t.Context()); err != nil {
		t.Fatalf("Check on a good setup: %v", err)
	}
	err := newGuard(t, client, dynamostore.WithTable("no_such_table")).Check(t.Context())
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured {
		t.Fatalf("Check on a missing table: %v; want Misconfigured", err)
	}
	t.Logf("missing table: %v", err)
	c.Break()
	err = newGuard(t, client, table, middleware.WithOpTimeout(5*time.Second)).Check(t.Context())
	if !idemkit.CodeOf(err).Transient() {
		t.Fatalf("Check with nothing listening: %v; want a transient code", err)
	}
	t.Logf("nothing listening: %v", err)
}
