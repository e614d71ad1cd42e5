package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
)

// lockProbes are the lock suite's probes of one store's table, read and
// written through admin.
type lockProbes struct {
	admin *sql.DB
	table string
}

// raiseFence leaves a tombstone of fence f under key, as a released lock
// of that fence would (kept past f plus the default clock step).
func (p lockProbes) raiseFence(ctx context.Context, key string, f idemkit.Fence) error {
	_, err := p.admin.ExecContext(ctx, `INSERT INTO `+p.table+` (record_key, fingerprint, lock_id, state, response, fence, created_at, expires_at, keep_until)
		SELECT n.k, '', NULL, 0, '', n.f, n.t, n.t, (n.f + 1) * 1000 + 60000000
		FROM (SELECT ? AS k, ? AS f, `+nowSQL+` AS t) AS n
		ON DUPLICATE KEY UPDATE state = 0, fingerprint = '', lock_id = NULL, response = '', fence = n.f,
			expires_at = n.t, keep_until = (n.f + 1) * 1000 + 60000000`, []byte(key), int64(f))
	return err
}

func (p lockProbes) fence(ctx context.Context, key string) (idemkit.Fence, error) {
	var f int64
	err := p.admin.QueryRowContext(ctx, `SELECT fence FROM `+p.table+` WHERE record_key = ?`, []byte(key)).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return idemkit.Fence(f), err
}

func (p lockProbes) stored(ctx context.Context, key string) (bool, error) {
	var n int
	err := p.admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+p.table+` WHERE record_key = ? AND state <> 0`, []byte(key)).Scan(&n)
	return n > 0, err
}

// TestLockConformance runs the lock suite through the lock library over a
// store on a *sql.DB, each case with its own table (and, for the case that
// restarts it, its own server).
func TestLockConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.MySQL(t)
		if cfg.Restart {
			srv = testenv.NewMySQL(t)
		}
		admin := newDB(t, srv.DSN, 2, nil)
		opt := table(t, admin)
		db := newDB(t, srv.DSN, 8, nil)
		if err := db.PingContext(t.Context()); err != nil { // connect before the suite's clock starts
			t.Fatal(err)
		}
		s, err := New(db, opt)
		if err != nil {
			t.Fatal(err)
		}
		p := lockProbes{admin: admin, table: tableOf(s)}
		e := &locktest.Env{
			Store: s, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored, Keys: immortal(admin, s),
			Break: func() { _ = db.Close() },
		}
		if cfg.Restart {
			// database/sql replaces the connections the restart broke.
			e.Restart = func(t *testing.T) { srv.Restart(t) }
		}
		return e
	})
}

// lockClients returns n lock Clients over stores on the same table, each
// with a pool of its own, as n processes would have.
func lockClients(t *testing.T, dsn string, n int) []*lock.Client {
	t.Helper()
	admin := newDB(t, dsn, 2, nil)
	opt := table(t, admin)
	clients := make([]*lock.Client, n)
	for i := range clients {
		s, err := New(newDB(t, dsn, 4, nil), opt)
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
	clients := lockClients(t, testenv.MySQL(t).DSN, 4)
	const (
		keys      = 4
		leases    = 15
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
		if len(gs) < leases {
			t.Fatalf("%s: %d leases granted; want %d", k, len(gs), leases)
		}
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

// TestLocksFoundByIDAcrossClients: a lock acquired through one Client is
// found by its id through another Client on another pool (FindClaim by the
// lock_id index), and no longer once released.
func TestLocksFoundByIDAcrossClients(t *testing.T) {
	t.Parallel()
	clients := lockClients(t, testenv.MySQL(t).DSN, 2)
	ctx := t.Context()
	lease, ok, err := clients[0].Acquire(ctx, "found/by-id", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	got, ok, err := clients[1].LookupID(ctx, lease.ID)
	if err != nil || !ok || got.Fence != lease.Fence || !got.ExpiresAt.Equal(lease.ExpiresAt) {
		t.Fatalf("LookupID on another client = %+v, %v, %v; want the lease %+v", got, ok, err, lease)
	}
	if st, err := clients[1].Release(ctx, lease.ID); err != nil || !st.OK {
		t.Fatalf("Release through another client = %+v, %v", st, err)
	}
	if _, ok, err := clients[0].LookupID(ctx, lease.ID); err != nil || ok {
		t.Fatalf("LookupID after the release = %v, %v; want not found", ok, err)
	}
}
