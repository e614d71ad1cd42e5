package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

var limitsOnly = flag.Bool("limits", false,
	"TestLimits: run the stores-against-the-backend scenarios alone, sized by -duration, and print their table")

// TestLimits runs the stores-against-the-backend scenarios alone, sized by
// -duration, when given -limits (TestReport runs them with the others):
//
//	go test -count=1 -run '^TestLimits$' -timeout 30m . -args -limits -duration=3s
func TestLimits(t *testing.T) {
	if !*limitsOnly {
		t.Skip("TestReport runs these scenarios; -limits runs them alone")
	}
	results := limitScenarios(t, *duration)
	checkLimits(t, results)
	var buf bytes.Buffer
	if err := WriteLimits(&buf, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// LimitResult is one row of the stores-against-the-backend table: a store
// and the plain commands that make the same round trips (the limit), in the
// same rounds.
type LimitResult struct {
	Store    string // the store's package name
	Workload string // "first execution" or "replay"
	Ours     Result // the store's calls
	Limit    Result // the plain commands
	// The server's CPU per call (a first execution's two round trips, or
	// a replay's one), by the server's own accounting; 0 where it is not
	// accounted (memory, the Firestore emulator).
	OursCPU, LimitCPU time.Duration
}

// Ratio is the store's throughput over the limit's.
func (r LimitResult) Ratio() float64 {
	if l := r.Limit.OpsPerSec(); l > 0 {
		return r.Ours.OpsPerSec() / l
	}
	return 0
}

const (
	limitWorkers = 16
	limitLease   = 30 * time.Second                                      // a claim's lease, as the limit's first write keeps it
	limitKeep    = 24 * time.Hour                                        // how long an outcome is kept
	limitFP      = "sha256:2jmj7l5rSw0yVb_vlWAYkK_YBwk-1f2e3d4c5b6a7980" // a fingerprint's size
)

// limitResponse is what a completion writes, store and limit alike: about
// the size of the demo order's encoded response.
var limitResponse = []byte(`{"status":201,"headers":{"Content-Type":["application/json"],"Location":["/orders/1"]},"body":{"order":1,"request":{"item":"book","quantity":1}}}`)

// limitCalls is one side of a row: a first execution (two round trips) and
// a replay (one) of key.
type limitCalls struct {
	first, replay func(ctx context.Context, key string) error
}

// storeCalls are the store's own: Claim of a new key then Complete with
// the claim's fence; a replay is a Claim of a completed key, which returns
// the outcome.
func storeCalls(s store.Store) limitCalls {
	return limitCalls{
		first: func(ctx context.Context, key string) error {
			rec, claimed, err := s.Claim(ctx, key, limitFP, limitLease)
			if err != nil {
				return err
			}
			if !claimed {
				return fmt.Errorf("claim of a new key refused: %s", rec.State)
			}
			ok, err := s.Complete(ctx, store.Record{Key: key, Fingerprint: limitFP, State: store.StateCompleted,
				Response: limitResponse, Fence: rec.Fence}, limitKeep)
			if err == nil && !ok {
				err = errors.New("completion refused")
			}
			return err
		},
		replay: func(ctx context.Context, key string) error {
			rec, claimed, err := s.Claim(ctx, key, limitFP, limitLease)
			if err != nil {
				return err
			}
			if claimed || rec.State != store.StateCompleted || !bytes.Equal(rec.Response, limitResponse) {
				return fmt.Errorf("claim of a completed key: claimed %v, state %s", claimed, rec.State)
			}
			return nil
		},
	}
}

// memoryLimit is a mutex-guarded map: an insert of a new key, then a
// write of its outcome; a replay is a read.
func memoryLimit() limitCalls {
	type record struct {
		fp       string
		state    store.State
		response []byte
		expires  time.Time
	}
	var (
		mu sync.Mutex
		m  = map[string]record{}
	)
	return limitCalls{
		first: func(_ context.Context, key string) error {
			mu.Lock()
			if _, ok := m[key]; ok {
				mu.Unlock()
				return errors.New("insert of a new key found one")
			}
			m[key] = record{fp: limitFP, state: store.StateClaimed, expires: time.Now().Add(limitLease)}
			mu.Unlock()
			mu.Lock()
			r := m[key]
			r.state, r.response, r.expires = store.StateCompleted, limitResponse, time.Now().Add(limitKeep)
			m[key] = r
			mu.Unlock()
			return nil
		},
		replay: func(_ context.Context, key string) error {
			mu.Lock()
			r, ok := m[key]
			mu.Unlock()
			if !ok || r.state != store.StateCompleted {
				return errors.New("read of a completed key found none")
			}
			return nil
		},
	}
}

// redisLimit is SET key fp NX PX, then SET key response XX PX; a replay
// is a GET.
func redisLimit(c *redis.Client, prefix string) limitCalls {
	return limitCalls{
		first: func(ctx context.Context, key string) error {
			ok, err := c.SetNX(ctx, prefix+key, limitFP, limitLease).Result()
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("SET NX of a new key refused")
			}
			return c.SetArgs(ctx, prefix+key, limitResponse, redis.SetArgs{Mode: "XX", TTL: limitKeep}).Err()
		},
		replay: func(ctx context.Context, key string) error {
			return c.Get(ctx, prefix+key).Err()
		},
	}
}

// postgresLimit is INSERT … ON CONFLICT DO NOTHING then UPDATE … WHERE
// key = $1 on table (made by pgstore.SetupSchema, so shaped and indexed as
// the store's); a replay is SELECT … WHERE key = $1.
func postgresLimit(pool *pgxpool.Pool, table string) limitCalls {
	t := pgx.Identifier{table}.Sanitize()
	insert := `INSERT INTO ` + t + ` (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
VALUES ($1, $2, 1, '', $3, now(), now() + interval '30 seconds', now() + interval '90 seconds') ON CONFLICT (key) DO NOTHING`
	update := `UPDATE ` + t + ` SET state = 2, response = $2, created_at = now(), expires_at = now() + interval '1 day',
keep_until = now() + interval '1 day' WHERE key = $1`
	sel := `SELECT fingerprint, state, response, fence, created_at, expires_at FROM ` + t + ` WHERE key = $1`
	return limitCalls{
		first: func(ctx context.Context, key string) error {
			tag, err := pool.Exec(ctx, insert, key, []byte(limitFP), time.Now().UnixMilli())
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return errors.New("insert of a new key found one")
			}
			tag, err = pool.Exec(ctx, update, key, limitResponse)
			if err == nil && tag.RowsAffected() != 1 {
				err = errors.New("update found no row")
			}
			return err
		},
		replay: func(ctx context.Context, key string) error {
			var (
				fp, response       []byte
				state              int16
				fence              int64
				created, expiresAt time.Time
			)
			return pool.QueryRow(ctx, sel, key).Scan(&fp, &state, &response, &fence, &created, &expiresAt)
		},
	}
}

// firestoreLimit is a Create of a document then an Update of it; a replay
// is a Get.
func firestoreLimit(c *firestore.Client, collection string) limitCalls {
	col := c.Collection(collection)
	return limitCalls{
		first: func(ctx context.Context, key string) error {
			doc := col.Doc(key)
			now := time.Now()
			if _, err := doc.Create(ctx, map[string]any{"fingerprint": []byte(limitFP), "state": 1, "response": []byte{},
				"fence": now.UnixMilli(), "created_at": now, "expires_at": now.Add(limitLease)}); err != nil {
				return err
			}
			_, err := doc.Update(ctx, []firestore.Update{{Path: "state", Value: 2}, {Path: "response", Value: limitResponse},
				{Path: "expires_at", Value: time.Now().Add(limitKeep)}})
			return err
		},
		replay: func(ctx context.Context, key string) error {
			_, err := col.Doc(key).Get(ctx)
			return err
		},
	}
}

// limitBackend is one store and its limit on the same server.
type limitBackend struct {
	name        string // the store's package name
	ours, limit limitCalls
	meter       cpuMeter // the server's CPU; nil where it is not accounted
	// renew, when set, gives both sides anew for every round (memory: a
	// new store and a new map, so that neither grows over the rounds).
	renew func() (ours, limit limitCalls)
}

// limitScenarios measures each store against its limit, without HTTP, at
// 16 goroutines: first executions (new keys) and replays (each goroutine
// claims one key of its own, completed before). Redis runs with
// appendonly yes and appendfsync everysec, PostgreSQL with fsync=on (each
// a server of its own), Firestore is the emulator. Each workload runs in
// rounds, every store and every limit once a round (the store first in
// even rounds, the limit first in odd ones); a row adds up its rounds.
func limitScenarios(t *testing.T, d time.Duration) []LimitResult {
	ctx := t.Context()
	name := testenv.Name(t)

	redisSrv := testenv.NewRedis(t, "--appendfsync", "everysec")
	newRedis := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rs, err := redisstore.New(newRedis(), redisstore.WithKeyPrefix(name+":store:"))
	if err != nil {
		t.Fatal(err)
	}
	redisLimitClient := newRedis()

	pgSrv := testenv.NewPostgres(t, "-c", "fsync=on", "-c", "full_page_writes=on")
	newPool := func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, pgSrv.URL+"&pool_max_conns=32")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	storePool, limitPool := newPool(), newPool()
	var fsync string
	if err := limitPool.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
		t.Fatalf("PostgreSQL for the limits: fsync = %q (%v), want on", fsync, err)
	}
	storeTable, limitTable := pgstore.WithTable(name+"_store"), name+"_limit"
	if err := pgstore.SetupSchema(ctx, storePool, storeTable); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.SetupSchema(ctx, limitPool, pgstore.WithTable(limitTable)); err != nil {
		t.Fatal(err)
	}
	ps, err := pgstore.New(storePool, storeTable)
	if err != nil {
		t.Fatal(err)
	}
	pgMeter, err := postgresCPU(ctx, limitPool)
	if err != nil {
		t.Fatal(err)
	}

	testenv.Firestore(t)
	newFirestore := func() *firestore.Client {
		c, err := firestore.NewClient(ctx, testenv.FirestoreProject(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	fs, err := firestorestore.New(newFirestore(), firestorestore.WithCollection(name+"_store"))
	if err != nil {
		t.Fatal(err)
	}

	backends := []limitBackend{
		{name: "memstore", renew: func() (limitCalls, limitCalls) { return storeCalls(memstore.New()), memoryLimit() }},
		{name: "redisstore", ours: storeCalls(rs), limit: redisLimit(redisLimitClient, name+":limit:"), meter: redisCPU(redisLimitClient)},
		{name: "pgstore", ours: storeCalls(ps), limit: postgresLimit(limitPool, limitTable), meter: pgMeter},
		{name: "firestorestore", ours: storeCalls(fs), limit: firestoreLimit(newFirestore(), name+"_limit")},
	}
	// prepare completes the key of each goroutine's replays, on both sides.
	prepare := func(b *limitBackend) {
		for w := range limitWorkers {
			key := fmt.Sprint("replay-", w)
			if err := errors.Join(b.ours.first(ctx, key), b.limit.first(ctx, key)); err != nil {
				t.Fatalf("%s: a completed key for the replays: %v", b.name, err)
			}
		}
	}

	// Rounds of about a second at most: more rounds interleave better, and
	// a memory round starts empty, so its records stay far below
	// memstore's default bound (a million) at this machine's pace.
	rounds := max(3, int(d/time.Second))
	var results []LimitResult
	for _, workload := range []string{"first execution", "replay"} {
		type sums struct {
			runs [2][]Result
			cpu  [2]time.Duration
		}
		rows := make([]sums, len(backends))
		for bi := range backends {
			if backends[bi].renew == nil && workload == "replay" {
				prepare(&backends[bi])
			}
		}
		for round := range rounds {
			for bi := range backends {
				b := &backends[bi]
				if b.renew != nil {
					b.ours, b.limit = b.renew()
					if workload == "replay" {
						prepare(b)
					}
				}
				for k := range 2 {
					side := (k + round) % 2 // 0 the store, 1 the limit
					calls := []limitCalls{b.ours, b.limit}[side]
					r, cpu, err := measured(ctx, b.meter, func() Result {
						return Run(ctx, limitWorkers, d/time.Duration(rounds), func(ctx context.Context, w, i int) error {
							if workload == "replay" {
								return calls.replay(ctx, fmt.Sprint("replay-", w))
							}
							return calls.first(ctx, fmt.Sprint("first-", round, "-", w, "-", i))
						})
					})
					if err != nil {
						t.Fatalf("%s: the server's CPU: %v", b.name, err)
					}
					rows[bi].runs[side] = append(rows[bi].runs[side], r)
					rows[bi].cpu[side] += cpu
				}
			}
		}
		for bi, b := range backends {
			lr := LimitResult{Store: b.name, Workload: workload, Ours: combine(rows[bi].runs[0]), Limit: combine(rows[bi].runs[1])}
			if b.meter != nil {
				lr.OursCPU = perCycle(rows[bi].cpu[0], rows[bi].runs[0])
				lr.LimitCPU = perCycle(rows[bi].cpu[1], rows[bi].runs[1])
			}
			results = append(results, lr)
		}
	}
	// One row per store and workload, by store.
	var sorted []LimitResult
	for _, b := range backends {
		for _, r := range results {
			if r.Store == b.name {
				sorted = append(sorted, r)
			}
		}
	}
	return sorted
}

// perCycle is cpu over the cycles of runs, the warm-ups' too (the CPU was
// measured around the whole of each run).
func perCycle(cpu time.Duration, runs []Result) time.Duration {
	n := 0
	for _, r := range runs {
		n += r.Cycles
	}
	if n == 0 {
		return 0
	}
	return cpu / time.Duration(n)
}

// checkLimits fails the test when a row made no calls, had errors, or has
// no CPU figure where the server accounts for it.
func checkLimits(t *testing.T, results []LimitResult) {
	t.Helper()
	for _, r := range results {
		for _, side := range []struct {
			what string
			r    Result
			cpu  time.Duration
		}{{"store", r.Ours, r.OursCPU}, {"limit", r.Limit, r.LimitCPU}} {
			if side.r.Ops == 0 || side.r.Errors > 0 {
				t.Errorf("%s / %s / %s: %d calls, %d errors", r.Store, r.Workload, side.what, side.r.Ops, side.r.Errors)
			}
			if (r.Store == "redisstore" || r.Store == "pgstore") && side.cpu <= 0 {
				t.Errorf("%s / %s / %s: no server CPU measured", r.Store, r.Workload, side.what)
			}
		}
	}
}

// WriteLimits writes the stores-against-the-backend table.
func WriteLimits(w io.Writer, results []LimitResult) error {
	if _, err := fmt.Fprintf(w, "\n### Stores against the backend alone (%d goroutines, no HTTP)\n\n"+
		"| store | workload | store ops/s | limit ops/s | store: server CPU per call | limit: server CPU per call | store/limit |\n"+
		"| --- | --- | --- | --- | --- | --- | --- |\n", limitWorkers); err != nil {
		return err
	}
	for _, r := range results {
		if _, err := fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s | %s | %.2f× |\n", r.Store, r.Workload,
			r.Ours.OpsPerSec(), r.Limit.OpsPerSec(), cpuCell(r.OursCPU), cpuCell(r.LimitCPU), r.Ratio()); err != nil {
			return err
		}
	}
	return nil
}

// cpuCell prints a CPU time per call in microseconds, or "—" for none.
func cpuCell(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}
