package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
)

// lockProbes are the lock suite's probes of one store's table, read and
// written through admin.
type lockProbes struct {
	admin *pgxpool.Pool
	table string
}

// raiseFence leaves a tombstone of fence f under key, as a released lock
// of that fence would (kept past f plus the default clock step).
func (p lockProbes) raiseFence(ctx context.Context, key string, f idemkit.Fence) error {
	_, err := p.admin.Exec(ctx, `INSERT INTO `+p.table+` AS r (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
		SELECT $1::text, '', 0, '', $2::bigint, n.t, n.t, timestamptz 'epoch' + ($2::bigint + 1) * interval '1 millisecond' + interval '1 minute'
		FROM (SELECT clock_timestamp() AS t) AS n
		ON CONFLICT (key) DO UPDATE SET state = 0, fingerprint = '', response = '', fence = EXCLUDED.fence,
			expires_at = EXCLUDED.expires_at, keep_until = EXCLUDED.keep_until`, storedKey(key), int64(f))
	return err
}

func (p lockProbes) fence(ctx context.Context, key string) (idemkit.Fence, error) {
	var f int64
	err := p.admin.QueryRow(ctx, `SELECT fence FROM `+p.table+` WHERE key = $1`, storedKey(key)).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return idemkit.Fence(f), err
}

func (p lockProbes) stored(ctx context.Context, key string) (bool, error) {
	var ok bool
	err := p.admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+p.table+` WHERE key = $1 AND state <> 0)`, storedKey(key)).Scan(&ok)
	return ok, err
}

// TestLockConformance runs the lock suite through the lock library over a
// store on a *pgxpool.Pool, each case with its own table (and, for the
// case that restarts it, its own server).
func TestLockConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.Postgres(t)
		if cfg.Restart {
			srv = testenv.NewPostgres(t)
		}
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		pool := newPool(t, srv.URL, 8)
		if err := pool.Ping(t.Context()); err != nil { // connect before the suite's clock starts
			t.Fatal(err)
		}
		s, err := New(pool, opt)
		if err != nil {
			t.Fatal(err)
		}
		p := lockProbes{admin: admin, table: tableOf(s)}
		e := &locktest.Env{
			Store: s, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored, Keys: immortal(admin, s),
			Break: pool.Close,
		}
		if cfg.Restart {
			e.Restart = func(t *testing.T) {
				srv.Restart(t)
				pool.Reset() // drop the connections the restart broke
				admin.Reset()
			}
		}
		return e
	})
}

// lockClients returns n lock Clients over stores on the same table, each
// with a pool of its own tagged app, as n processes would have.
func lockClients(t *testing.T, url string, n int, app string) []*lock.Client {
	t.Helper()
	admin := newPool(t, url, 2)
	opt := table(t, admin)
	clients := make([]*lock.Client, n)
	for i := range clients {
		s, err := New(newPool(t, url, 4, appName(app)), opt)
		if err != nil {
			t.Fatal(err)
		}
		if clients[i], err = lock.New(s); err != nil {
			t.Fatal(err)
		}
	}
	return clients
}

// grant is one lease as its holder saw it: its fence, the server's
// acquired-at, and the latest expiry an acquire or a successful extend
// returned.
type grant struct {
	fence    idemkit.Fence
	acquired time.Time
	until    time.Time
	extends  int
}

// TestLocksRaceAtExpiry races four Clients, each with its own pool, on
// four keys: holders extend their leases around the instant they run out
// while the others keep acquiring; nothing is released, so a lease ends
// only by expiry. For every key the leases, in fence order, never
// overlap: each is granted at or after the last expiry its predecessor's
// holder was promised, and fences grow with each grant.
func TestLocksRaceAtExpiry(t *testing.T) {
	t.Parallel()
	clients := lockClients(t, testenv.Postgres(t).URL, 4, testenv.Name(t))
	const (
		keys      = 4
		leases    = 20
		ttl       = 40 * time.Millisecond
		maxExtend = 3
	)
	ctx := t.Context()
	var (
		mu       sync.Mutex
		byKey    = make(map[string][]*grant)
		failures = make(chan error, keys*len(clients))
		wg       sync.WaitGroup
	)
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(byKey[k])
	}
	for i := range keys {
		k := fmt.Sprintf("race/%d", i)
		for _, c := range clients {
			wg.Go(func() {
				for count(k) < leases && ctx.Err() == nil {
					lease, ok, err := c.Acquire(ctx, k, ttl)
					if err != nil {
						failures <- fmt.Errorf("acquire: %w", err)
						return
					}
					if !ok {
						time.Sleep(time.Duration(rand.N(500)) * time.Microsecond)
						continue
					}
					g := &grant{fence: lease.Fence, acquired: lease.AcquiredAt, until: lease.ExpiresAt}
					mu.Lock()
					byKey[k] = append(byKey[k], g)
					mu.Unlock()
					for range rand.N(maxExtend + 1) {
						time.Sleep(time.Until(g.until) + time.Duration(rand.N(3000)-1500)*time.Microsecond)
						st, err := c.Extend(ctx, lease.ID, ttl)
						if err != nil {
							failures <- fmt.Errorf("extend: %w", err)
							return
						}
						if !st.OK {
							break
						}
						mu.Lock()
						g.until, g.extends = st.ExpiresAt, g.extends+1
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	for k, gs := range byKey {
		slices.SortFunc(gs, func(a, b *grant) int { return a.fence.Compare(b.fence) })
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			if next.fence <= prev.fence {
				t.Fatalf("%s: fence %v follows %v; want growing fences", k, next.fence, prev.fence)
			}
			if next.acquired.Before(prev.until) {
				t.Fatalf("%s: lease %v was granted at %v, before lease %v (extended %d times) ran out at %v: two holders at once",
					k, next.fence, next.acquired.Format(time.RFC3339Nano), prev.fence, prev.extends, prev.until.Format(time.RFC3339Nano))
			}
		}
	}
}

// TestLocksHeldOnceUnderTerminatedConnections runs acquire, hold and
// release cycles of four Clients, each with its own pool, on two keys,
// while another connection keeps terminating their backends
// (pg_terminate_backend) mid-statement, so that answers are lost after
// their statement committed. Holders are counted as they hold: never two
// on a key at once, and each grant's fence is above every earlier one of
// its key. Once the faults stop, every key can be acquired again.
func TestLocksHeldOnceUnderTerminatedConnections(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	clients := lockClients(t, srv.URL, 4, app)
	admin := newPool(t, srv.URL, 1)
	const (
		keys   = 2
		cycles = 30
		ttl    = time.Second // a lost release or acquire holds its key this long at most
	)
	ctx := t.Context()
	stop := make(chan struct{})
	killer := make(chan error, 1)
	var killed atomic.Int64
	go func() {
		defer close(killer)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2+rand.N(10)) * time.Millisecond):
			}
			var n int64
			if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM (
				SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = $1 AND pid <> pg_backend_pid()
				ORDER BY state = 'idle', random() LIMIT 1) AS t`, app).Scan(&n); err != nil {
				killer <- err
				return
			}
			killed.Add(n)
		}
	}()

	var (
		holders [keys]atomic.Int32
		mu      sync.Mutex
		last    [keys]idemkit.Fence
		granted atomic.Int32
		errs    = make(chan error, keys*len(clients))
		wg      sync.WaitGroup
	)
	for k := range keys {
		key := fmt.Sprint("held-once/", k)
		for _, c := range clients {
			wg.Go(func() {
				for range cycles {
					lease, ok, err := c.Acquire(ctx, key, ttl)
					switch code := idemkit.CodeOf(err); {
					case err != nil && code == idemkit.CodeServiceUnavailable:
						continue // a lost connection: the acquire may have landed, and then holds the key until ttl
					case err != nil:
						errs <- fmt.Errorf("acquire: %w", err)
						return
					case !ok:
						time.Sleep(time.Duration(1+rand.N(3)) * time.Millisecond)
						continue
					}
					if n := holders[k].Add(1); n != 1 {
						errs <- fmt.Errorf("%s: %d holders at once", key, n)
					}
					mu.Lock()
					if lease.Fence <= last[k] {
						errs <- fmt.Errorf("%s: fence %v granted after %v", key, lease.Fence, last[k])
					}
					last[k] = lease.Fence
					mu.Unlock()
					granted.Add(1)
					time.Sleep(time.Millisecond)
					holders[k].Add(-1)
					if _, err := c.Release(ctx, lease.ID); err != nil && idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
						errs <- fmt.Errorf("release: %w", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	if err := <-killer; err != nil {
		t.Fatalf("the killer failed: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if granted.Load() == 0 || killed.Load() == 0 {
		t.Fatalf("%d grants, %d backends terminated: the test saw no contention under faults", granted.Load(), killed.Load())
	}
	time.Sleep(ttl + margin) // whatever a lost answer left behind runs out
	for k := range keys {
		key := fmt.Sprint("held-once/", k)
		lease, ok, err := clients[0].Acquire(ctx, key, ttl)
		if err != nil || !ok || lease.Fence <= last[k] {
			t.Fatalf("%s after the faults: %+v, %v, %v; want a grant above fence %v", key, lease, ok, err, last[k])
		}
	}
	t.Logf("%d grants, %d backends terminated", granted.Load(), killed.Load())
}

// TestLocksOnStalledServer freezes the server (SIGSTOP) and checks that
// every lock operation, on established connections and on a Client
// without any yet, fails with a coded timeout or unavailability by its
// ctx's deadline instead of hanging, and that the Client works again once
// the server resumes.
func TestLocksOnStalledServer(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	newClient := func() *lock.Client {
		s, err := New(newPool(t, srv.URL, 4), opt)
		if err != nil {
			t.Fatal(err)
		}
		c, err := lock.New(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newClient()
	lease, ok, err := c.Acquire(t.Context(), "stall/held", time.Hour)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	fresh := newClient() // no connection yet
	resume := srv.Stall(t)
	defer resume()

	for _, op := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error { _, _, err := c.Acquire(ctx, "stall/free", time.Minute); return err }},
		{"Release", func(ctx context.Context) error { _, err := c.Release(ctx, lease.ID); return err }},
		{"Extend", func(ctx context.Context) error { _, err := c.Extend(ctx, lease.ID, time.Hour); return err }},
		{"IsLocked", func(ctx context.Context) error { _, err := c.IsLocked(ctx, lease.Key); return err }},
		{"LookupKey", func(ctx context.Context) error { _, _, err := c.LookupKey(ctx, lease.Key); return err }},
		{"LookupID of another Client's lock", func(ctx context.Context) error { _, _, err := fresh.LookupID(ctx, lease.ID); return err }},
		{"Acquire on a new connection", func(ctx context.Context) error {
			_, _, err := fresh.Acquire(ctx, "stall/free", time.Minute)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		err := op.run(ctx)
		cancel()
		if code := idemkit.CodeOf(err); code != idemkit.CodeNetworkTimeout && code != idemkit.CodeServiceUnavailable {
			t.Errorf("%s on a stalled server: %v; want NetworkTimeout or ServiceUnavailable", op.name, err)
		}
	}

	resume()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if info, ok, err := fresh.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupID after the server resumed: %+v, %v, %v", info, ok, err)
	}
	if st, err := c.Release(ctx, lease.ID); err != nil || !st.OK {
		t.Fatalf("Release after the server resumed: %+v, %v", st, err)
	}
}

// The store offers the lock library its lookup by lock id.
var _ lock.Finder = (*Store)(nil)
