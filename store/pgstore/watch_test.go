package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// slowPoll is a duplicate's poll back-off far above any notification
// delay: its first poll comes slowPoll/2 after it starts waiting at the
// earliest (the back-off's jitter), so a duplicate that answers sooner
// after it started was woken by a notification.
const slowPoll = 5 * time.Second

var slowPolls = middleware.WithBackoff(idemkit.Backoff{Base: slowPoll, Max: slowPoll})

// watching returns how many watches of recordKey s has in place: registered
// and with the key's claim marked as waited for.
func watching(s *Store, recordKey string) int {
	s.lis.mu.Lock()
	defer s.lis.mu.Unlock()
	if w := s.lis.watches[storedKey(recordKey)]; w != nil && w.marked {
		return w.n
	}
	return 0
}

// listening counts the backends of the application app whose last
// statement was a LISTEN: the listening connections.
func listening(t testing.TB, admin *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// killListeners terminates the listening backends of app, waits until
// they have left pg_stat_activity, and returns how many it terminated.
// pg_terminate_backend only signals a backend: one that has not exited yet
// is still listed, with LISTEN as its last statement, and would be counted
// by listening as the store listening again.
func killListeners(t testing.TB, admin *pgxpool.Pool, app string) int {
	t.Helper()
	var pids []int32
	if err := admin.QueryRow(context.Background(), `SELECT coalesce(array_agg(pid) FILTER (WHERE pg_terminate_backend(pid)), '{}')
		FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	until(t, "the terminated listeners to exit", func() bool {
		var left int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	return len(pids)
}

// until waits for cond, checking every few milliseconds, and fails the
// test should it not hold within a minute.
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// wake waits for ch to close, and fails the test should it not within a
// minute.
func wake(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not fire within a minute", what)
	}
}

// fired reports whether ch is closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// duplicates runs one request on holder that holds key until release is
// closed, and n duplicates of it, duplicate i on guards[i%len(guards)],
// which must all replay its response. It returns once every duplicate has
// its watch in place (counted by watches), with a function that ends the
// work and returns, for each duplicate, how long after its own start and
// after the work's end it answered.
func duplicates(t *testing.T, holder *middleware.Guard, guards []*middleware.Guard, watches func() int, key string, n int) (finish func() (sinceStart, sinceEnd []time.Duration)) {
	t.Helper()
	ctx := t.Context()
	release, started := make(chan struct{}), make(chan struct{})
	var ended time.Time
	first := make(chan error, 1)
	go func() {
		out, err := holder.Execute(ctx, key, fpOf("dup"), func(context.Context) (middleware.Result, error) {
			close(started)
			<-release
			ended = time.Now()
			return middleware.Result{Value: []byte(key)}, nil
		})
		if err == nil && (out.Replayed || !out.Recorded) {
			err = fmt.Errorf("the first request: %+v; want executed and recorded", out)
		}
		first <- err
	}()
	<-started
	sinceStart, answered := make([]time.Duration, n), make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			out, err := guards[i%len(guards)].Execute(ctx, key, fpOf("dup"), func(context.Context) (middleware.Result, error) {
				t.Errorf("%s: a duplicate ran the work", key)
				return middleware.Result{}, nil
			})
			answered[i] = time.Now()
			sinceStart[i] = answered[i].Sub(start)
			if err != nil || !out.Replayed || string(out.Value) != key {
				t.Errorf("%s: duplicate %d: %+v, %v; want a replay", key, i, out, err)
			}
		})
	}
	until(t, fmt.Sprintf("%d watches of %s", n, key), func() bool { return watches() == n })
	return func() ([]time.Duration, []time.Duration) {
		close(release)
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		sinceEnd := make([]time.Duration, n)
		for i, a := range answered {
			sinceEnd[i] = a.Sub(ended)
		}
		return sinceStart, sinceEnd
	}
}

// notified fails the test when a duplicate answered later after its start
// than its first poll could have come with a poll back-off of poll (half
// of it, the back-off's jitter): it was not woken by the notification.
func notified(t *testing.T, what string, poll time.Duration, sinceStart []time.Duration) {
	t.Helper()
	for i, d := range sinceStart {
		if d >= poll/2 {
			t.Fatalf("%s: duplicate %d answered %v after it started, no sooner than its first poll: the notification did not wake it", what, i, d)
		}
	}
}

// TestDuplicatesWokenByNotification: 32 duplicates, on two guards with
// pools of their own, wait for a running request with a poll back-off of
// 5 s; each answers sooner after its own start than its first poll could
// have come (2.5 s at the earliest), so the notification woke it. One
// listening connection per store; after both are terminated
// (pg_terminate_backend), the stores listen again, and the next round is
// woken by notification as well.
func TestDuplicatesWokenByNotification(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	nodes := cluster(t, srv.URL, 2, app, middleware.WithLogger(discard()), slowPolls,
		middleware.WithWaitBudget(10*time.Second))
	admin := newPool(t, srv.URL, 1)
	guards := []*middleware.Guard{nodes[0].guard, nodes[1].guard}
	if n := listening(t, admin, app); n != 0 {
		t.Fatalf("%d listening connections before any watch; want none", n)
	}
	const n = 32
	var all []time.Duration
	for round := range 3 {
		key := fmt.Sprint("woken-", round)
		rk := "idempotency::" + key
		finish := duplicates(t, guards[round%2], guards, func() int {
			return watching(nodes[0].store, rk) + watching(nodes[1].store, rk)
		}, key, n)
		if got := listening(t, admin, app); got != 2 {
			t.Fatalf("round %d: %d listening connections; want one per store, 2", round, got)
		}
		sinceStart, sinceEnd := finish()
		notified(t, key, slowPoll, sinceStart)
		all = append(all, sinceEnd...)
		if killed := killListeners(t, admin, app); killed != 2 {
			t.Fatalf("round %d: terminated %d listening connections; want 2", round, killed)
		}
		until(t, "both stores to listen again", func() bool { return listening(t, admin, app) == 2 })
	}
	t.Logf("%d duplicates on 2 guards: from the work's end to the answer %s", len(all), percentiles(all))
}

// percentiles formats the p50, p99 and maximum of ds.
func percentiles(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", at(0.50), at(0.99), s[len(s)-1])
}

// TestLostNotificationFallsBackToPolling terminates the listening
// connection of a waiting duplicate's store and keeps it from listening
// again while the first request completes: the notification is lost, and
// the duplicate, polling every few milliseconds, still replays within its
// budget. Once the store listens again, a later duplicate with a 5 s poll
// back-off is woken by notification.
func TestLostNotificationFallsBackToPolling(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	holder, err := New(newPool(t, srv.URL, 4), opt)
	if err != nil {
		t.Fatal(err)
	}
	// The waiting side listens on connections of its own, the second and
	// later ones held back until gate is closed.
	listenCfg, err := pgx.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	listenCfg.RuntimeParams["application_name"] = app
	var attempts atomic.Int32
	gate := make(chan struct{})
	waiter, err := New(newPool(t, srv.URL, 4), opt, WithLogger(discard()),
		WithListenConn(func(ctx context.Context) (*pgx.Conn, error) {
			if attempts.Add(1) > 1 {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return pgx.ConnectConfig(ctx, listenCfg)
		}))
	if err != nil {
		t.Fatal(err)
	}
	newGuard := func(opts ...middleware.Option) *middleware.Guard {
		g, err := middleware.New(waiter, append([]middleware.Option{middleware.WithLogger(discard())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	hg, err := middleware.New(holder, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	fastPolls := newGuard(middleware.WithBackoff(idemkit.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}),
		middleware.WithWaitBudget(10*time.Second))
	finish := duplicates(t, hg, []*middleware.Guard{fastPolls}, func() int { return watching(waiter, "idempotency::lost") }, "lost", 1)
	if killed := killListeners(t, admin, app); killed != 1 {
		t.Fatalf("terminated %d listening connections; want 1", killed)
	}
	until(t, "the listener to try again", func() bool { return attempts.Load() >= 2 })
	finish() // the notification is sent while nothing listens: the duplicate polls
	if n := listening(t, admin, app); n != 0 {
		t.Fatalf("%d listening connections while the listener is held back", n)
	}

	close(gate)
	until(t, "the store to listen again", func() bool { return listening(t, admin, app) == 1 })
	slow := newGuard(slowPolls, middleware.WithWaitBudget(10*time.Second))
	finish = duplicates(t, hg, []*middleware.Guard{slow}, func() int { return watching(waiter, "idempotency::again") }, "again", 1)
	sinceStart, _ := finish()
	notified(t, "after the listener came back", slowPoll, sinceStart)
	if n := listening(t, admin, app); n != 1 {
		t.Fatalf("%d listening connections; want 1", n)
	}
}

// TestListenersDoNotGrowWithWaiters: 1000 duplicates wait, on one key and
// on 50 keys, through two stores with pools of 8 connections: while they
// wait, each store has one listening connection, and no more connections
// than its pool and that one; every duplicate then replays, woken by the
// notification (its first poll would come 30 s after it started at the
// earliest).
func TestListenersDoNotGrowWithWaiters(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	const poll = time.Minute
	for _, keys := range []int{1, 50} {
		t.Run(fmt.Sprint(keys, "keys"), func(t *testing.T) {
			app := testenv.Name(t)
			nodes := cluster(t, srv.URL, 2, app, middleware.WithLogger(discard()),
				middleware.WithBackoff(idemkit.Backoff{Base: poll, Max: poll}), middleware.WithWaitBudget(2*poll))
			admin := newPool(t, srv.URL, 1)
			guards := []*middleware.Guard{nodes[0].guard, nodes[1].guard}
			const waiters = 1000
			finishes := make([]func() ([]time.Duration, []time.Duration), keys)
			for k := range keys {
				key := fmt.Sprint("many-", k)
				rk := "idempotency::" + key
				finishes[k] = duplicates(t, guards[k%2], guards, func() int {
					return watching(nodes[0].store, rk) + watching(nodes[1].store, rk)
				}, key, waiters/keys)
			}
			var conns int
			if err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&conns); err != nil {
				t.Fatal(err)
			}
			if n := listening(t, admin, app); n != 2 || conns > 2*(8+1) {
				t.Fatalf("%d waiting duplicates: %d listening connections, %d connections; want 2 listening, at most %d in all",
					waiters, n, conns, 2*(8+1))
			}
			var all []time.Duration
			for _, finish := range finishes {
				sinceStart, sinceEnd := finish()
				notified(t, "many", poll, sinceStart)
				all = append(all, sinceEnd...)
			}
			if n := listening(t, admin, app); n != 2 {
				t.Fatalf("after the duplicates: %d listening connections; want 2", n)
			}
			t.Logf("%d duplicates on %d keys, 2 stores: 2 listening connections, %d connections in all; from the work's end to the answer %s",
				waiters, keys, conns, percentiles(all))
		})
	}
}

// TestExactlyOnceWithNotification races 64 goroutines over two guards,
// each with its own pool, on one key, 20 times, with a 5 s poll back-off:
// the work runs exactly once a round, every duplicate replays, and none
// waited as long as its first poll (a hook sees every replay's wait).
func TestExactlyOnceWithNotification(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	var (
		mu      sync.Mutex
		replays int
		longest time.Duration
	)
	hook := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventReplayed {
			mu.Lock()
			replays++
			longest = max(longest, e.Waited)
			mu.Unlock()
		}
	}))
	nodes := cluster(t, srv.URL, 2, testenv.Name(t), middleware.WithLogger(discard()), slowPolls,
		middleware.WithWaitBudget(20*time.Second), hook)
	stats := guardtest.ExactlyOnce(t, []*middleware.Guard{nodes[0].guard, nodes[1].guard}, guardtest.Race{
		Callers: 64, Rounds: 20, KeyPrefix: "once-", MaxWork: 2 * time.Millisecond,
	})
	mu.Lock()
	defer mu.Unlock()
	if replays == 0 || longest >= slowPoll/2 {
		t.Fatalf("%d replays, the longest wait %v; want replays, each woken before its first poll (%v at the earliest)", replays, longest, slowPoll/2)
	}
	t.Logf("%+v; the longest wait of a replay %v", stats, longest)
}

// TestWatchEndsOfClaims checks the store's watches: Complete, Release and
// Delete of a claim close the channels of its watches (every watch of the
// key shares one), and only theirs; a key with no claim, or a completed
// one, closes at once; keys of any bytes and a table whose channel name
// had to be shortened work alike. Stopping a watch twice is harmless.
func TestWatchEndsOfClaims(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	schema := testenv.Name(t)
	schema += strings.Repeat("s", 63-len(schema))
	if _, err := admin.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	long := WithTable(schema + "." + strings.Repeat("t", 48))
	if err := SetupSchema(t.Context(), admin, long); err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]Option{"short channel": table(t, admin), "long channel": long} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			holder, err := New(newPool(t, srv.URL, 2), opt)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(newPool(t, srv.URL, 2), opt)
			if err != nil {
				t.Fatal(err)
			}
			if c := s.cfg.table.channel(); len(c) > maxChannelLen || (name == "long channel") != strings.Contains(c, "~") {
				t.Fatalf("channel %q (%d bytes)", c, len(c))
			}
			prefix := testenv.Name(t)
			ends := map[string]func(store.Record) (bool, error){
				"complete": func(c store.Record) (bool, error) {
					c.State, c.Response = store.StateCompleted, []byte("r")
					return holder.Complete(ctx, c, time.Hour)
				},
				"release": func(c store.Record) (bool, error) { return holder.Release(ctx, c.Key, c.Fence) },
				"delete":  func(c store.Record) (bool, error) { return holder.Delete(ctx, c.Key) },
			}
			for what, end := range ends {
				for _, key := range []string{prefix + what, prefix + what + "\x00\xff ключ"} {
					c, claimed, err := holder.Claim(ctx, key, fp, time.Hour)
					if err != nil || !claimed {
						t.Fatalf("Claim: %v, %v", claimed, err)
					}
					other, _, err := holder.Claim(ctx, key+"-other", fp, time.Hour)
					if err != nil {
						t.Fatal(err)
					}
					ch1, stop1 := s.Watch(ctx, key)
					ch2, stop2 := s.Watch(ctx, key)
					och, ostop := s.Watch(ctx, other.Key)
					if ch1 != ch2 || fired(ch1) || fired(och) {
						t.Fatalf("%s %q: a fresh watch fired, or two watches of a key do not share a channel", what, key)
					}
					if ok, err := end(c); err != nil || !ok {
						t.Fatalf("%s: %v, %v", what, ok, err)
					}
					wake(t, ch1, what)
					if fired(och) {
						t.Fatalf("%s %q: the watch of another key fired", what, key)
					}
					stop1()
					stop1()
					stop2()
					ostop()
				}
			}
			// No claim, and a completed claim: the watch closes at once.
			ch, stop := s.Watch(ctx, prefix+"absent")
			if !fired(ch) {
				t.Fatal("the watch of a key with no claim did not fire at once")
			}
			stop()
			ch, stop = s.Watch(ctx, prefix+"complete")
			if !fired(ch) {
				t.Fatal("the watch of a completed key did not fire at once")
			}
			stop()
		})
	}
}

// TestWatchWithoutListener: a store with no connection to listen on (a
// *pgx.Conn without WithListenConn, a pool with WithListenConn(nil), a
// pgx.Tx) returns a watch that never fires, and opens no listening
// connection; with WithListenConn a *pgx.Conn store listens.
func TestWatchWithoutListener(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	ctx := t.Context()
	holder, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inTx, err := New(tx, opt, WithListenConn(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) }))
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	onConn, err := New(connect(t, srv.URL), opt)
	if err != nil {
		t.Fatal(err)
	}
	off, err := New(newPool(t, srv.URL, 2, appName(app)), opt, WithListenConn(nil))
	if err != nil {
		t.Fatal(err)
	}
	listens, err := New(connect(t, srv.URL), opt, WithListenConn(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) }))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := holder.Claim(ctx, "k", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var silent []<-chan struct{}
	for _, s := range []*Store{inTx, onConn, off} {
		ch, stop := s.Watch(ctx, "k")
		defer stop()
		silent = append(silent, ch)
	}
	ch, stop := listens.Watch(ctx, "k")
	defer stop()
	if n := listening(t, admin, app); n != 1 {
		t.Fatalf("%d listening connections; want 1, the WithListenConn store's", n)
	}
	c.State = store.StateNotReplayable
	if ok, err := holder.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	wake(t, ch, "the WithListenConn store's watch")
	for i, ch := range silent {
		if ch == nil || fired(ch) {
			t.Fatalf("store %d: the watch of a store that cannot listen is nil or fired", i)
		}
	}
	if ch, _ := listens.Watch(ctx, ""); ch == nil || fired(ch) {
		t.Fatal("the watch of an invalid key is nil or fired")
	}
}

// TestListenerStopsWhenIdle: the listener closes its connection once no
// watch has needed it for its idle time, and the next Watch opens it
// again. A failing connect function leaves watches in place, polling; they
// fire once the store listens.
func TestListenerStopsWhenIdle(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	var refuse atomic.Bool
	s, err := New(admin, opt, WithLogger(discard()), WithListenConn(func(ctx context.Context) (*pgx.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("refused")
		}
		return pgx.ConnectConfig(ctx, cfg)
	}))
	if err != nil {
		t.Fatal(err)
	}
	s.lis.idle = 20 * time.Millisecond
	if _, _, err := s.Claim(ctx, "k", fp, time.Hour); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ch, stop := s.Watch(ctx, "k")
		if fired(ch) || listening(t, admin, app) != 1 {
			t.Fatal("no listening connection behind a watch in place")
		}
		stop()
		until(t, "the idle listener to stop", func() bool { return listening(t, admin, app) == 0 })
	}

	refuse.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	ch, stop := s.Watch(wctx, "k")
	cancel()
	defer stop()
	if fired(ch) || listening(t, admin, app) != 0 {
		t.Fatal("a watch fired, or a connection listens, though the store cannot connect")
	}
	refuse.Store(false)
	wake(t, ch, "the watch made while the store could not listen") // woken when it listens
	if n := listening(t, admin, app); n != 1 {
		t.Fatalf("%d listening connections; want 1", n)
	}
}

// TestChannelNames: a table's channel is "idemkit:" and its name, or,
// for names too long, a shortened name with a hash: at most 63 bytes, and
// distinct for distinct tables.
func TestChannelNames(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{
		"idemkit_records", "s.idemkit_records", "Idemkit_Records",
		strings.Repeat("s", 63) + "." + strings.Repeat("t", 48),
		strings.Repeat("s", 63) + "." + strings.Repeat("t", 47) + "u",
	} {
		tn, err := parseTableName(name)
		if err != nil {
			t.Fatal(err)
		}
		c := tn.channel()
		if len(c) > maxChannelLen || !strings.HasPrefix(c, "idemkit:") {
			t.Fatalf("%s: channel %q", name, c)
		}
		if other, ok := seen[c]; ok {
			t.Fatalf("%s and %s share the channel %q", name, other, c)
		}
		seen[c] = name
	}
	if c := (tableName{table: "idemkit_records"}).channel(); c != "idemkit:idemkit_records" {
		t.Fatalf("the default table's channel is %q", c)
	}
}

// TestWatchedFirstExecutionRoundTrips: with duplicates waiting on another
// node, a first execution still costs two statements on its node (claim,
// complete: the notification rides on the completion).
func TestWatchedFirstExecutionRoundTrips(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 2, testenv.Name(t), middleware.WithLogger(discard()), slowPolls,
		middleware.WithWaitBudget(10*time.Second))
	before := nodes[0].stmts.count()
	finish := duplicates(t, nodes[0].guard, []*middleware.Guard{nodes[1].guard},
		func() int { return watching(nodes[1].store, "idempotency::rt") }, "rt", 4)
	sinceStart, _ := finish()
	notified(t, "rt", slowPoll, sinceStart)
	if got := nodes[0].stmts.count() - before; got != 2 {
		t.Fatalf("the watched first execution took %d statements; want 2", got)
	}
}

// TestWatchTakenOverClaim: a claim whose lease ran out, taken over by a
// new claim, wakes the watches of the old one (their holder will not end
// it), so that they watch the new claim, whose completion then wakes them.
func TestWatchTakenOverClaim(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	ctx := t.Context()
	holder, err := New(newPool(t, srv.URL, 2), opt)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(newPool(t, srv.URL, 2), opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := holder.Claim(ctx, "k", fp, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch, stop := s.Watch(ctx, "k")
	defer stop()
	if fired(ch) {
		t.Fatal("the watch of a live claim fired at once")
	}
	var c store.Record
	until(t, "the lease to run out and a new claim to take the key", func() bool {
		rec, claimed, err := holder.Claim(ctx, "k", fp, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c = rec
		return claimed
	})
	wake(t, ch, "the watch of the claim taken over")
	ch2, stop2 := s.Watch(ctx, "k")
	defer stop2()
	if fired(ch2) {
		t.Fatal("the watch of the new claim fired at once")
	}
	c.State, c.Response = store.StateCompleted, []byte("r")
	if ok, err := holder.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	wake(t, ch2, "the watch of the new claim")
}

// TestWatchWokenByOwnEnds checks that a Complete, Release or Delete through
// the store wakes its own process's watches of the key when it returns,
// without waiting for the notification: the claim's waited-for mark is
// cleared behind the store's back, so no notification is sent at all.
func TestWatchWokenByOwnEnds(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	s, err := New(newPool(t, srv.URL, 2), table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for what, end := range map[string]func(store.Record) (bool, error){
		"complete": func(c store.Record) (bool, error) {
			c.State, c.Response = store.StateCompleted, []byte("r")
			return s.Complete(ctx, c, time.Hour)
		},
		"release": func(c store.Record) (bool, error) { return s.Release(ctx, c.Key, c.Fence) },
		"delete":  func(c store.Record) (bool, error) { return s.Delete(ctx, c.Key) },
	} {
		c, claimed, err := s.Claim(ctx, what, fp, time.Hour)
		if err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
		ch, stop := s.Watch(ctx, what)
		defer stop()
		if _, err := admin.Exec(ctx, `UPDATE `+tableOf(s)+` SET response = '' WHERE key = $1`, what); err != nil {
			t.Fatal(err)
		}
		if ok, err := end(c); err != nil || !ok {
			t.Fatalf("%s: %v, %v", what, ok, err)
		}
		if !fired(ch) {
			t.Fatalf("the store's own %s did not wake its watch of the key when it returned", what)
		}
	}
}

// TestCompleteNotifiesAMarkCommittedDuringIt marks a claim as waited for
// in a transaction that commits only once Complete waits for the row, so
// after Complete's snapshot: the completion still notifies, because it
// reads the mark on the row's newest version.
func TestCompleteNotifiesAMarkCommittedDuringIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	app := testenv.Name(t)
	s, err := New(newPool(t, srv.URL, 1, appName(app)), opt, WithListenConn(nil))
	if err != nil {
		t.Fatal(err)
	}
	c, claimed, err := s.Claim(ctx, "k", fp, time.Hour)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	listener := connect(t, srv.URL)
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{s.cfg.table.channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tx, err := connect(t, srv.URL).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if tag, err := tx.Exec(ctx, `UPDATE `+tableOf(s)+` SET response = '\x01'::bytea WHERE key = 'k' AND state = 1`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("marking the claim: %v, %v", tag, err)
	}
	completed := make(chan error, 1)
	go func() {
		c.State, c.Response = store.StateCompleted, []byte("r")
		ok, err := s.Complete(ctx, c, time.Hour)
		if err == nil && !ok {
			err = errors.New("the claim's completion did not take effect")
		}
		completed <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Complete never waited for the marking transaction's row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-completed; err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil || n.Payload != "k" {
		t.Fatalf("the completion's notification: %+v, %v; want one for k", n, err)
	}
}
