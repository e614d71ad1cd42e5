package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

var duplicatesOnly = flag.Bool("duplicates", false,
	"TestDuplicates: run the duplicates scenario alone, sized by -duration, and print its table (to compare two checkouts)")

const (
	// dupHandler is how long the first request's handler runs.
	dupHandler = 200 * time.Millisecond
	// dupTrialLength is about one trial's wall time, which sizes a full
	// run: -duration / dupTrialLength trials per row.
	dupTrialLength = 250 * time.Millisecond
	// dupMinAnswers is the fewest duplicates a full run measures per row
	// (so that N = 1 still has a p99 worth the name).
	dupMinAnswers = 50
)

// dupCounts are the numbers of duplicates of one request.
var dupCounts = []int{1, 32, 256}

// DupResult is one row of the duplicates scenario: N duplicates of a
// running request, over several trials.
type DupResult struct {
	Backend    string
	N          int             // duplicates per trial
	Trials     int             // trials run
	Delays     []time.Duration // sorted: the handler's end to each replayed duplicate's answer
	Firsts     []time.Duration // sorted: the handler's end to the first request's own answer (its completion written)
	InProgress int             // duplicates answered ErrInProgress (their wait budget ran out)
	Errors     []string        // anything else: another error, a second execution, a wrong value
}

// dupBackend is a backend with two guards, each over its own client.
type dupBackend struct {
	name   string
	guards [2]*middleware.Guard
}

// TestDuplicates runs the duplicates scenario alone, sized by -duration,
// when given -duplicates (TestReport runs it with the others), to compare
// two checkouts side by side:
//
//	go test -count=1 -run '^TestDuplicates$' -timeout 30m . -args -duplicates -duration=3s
func TestDuplicates(t *testing.T) {
	if !*duplicatesOnly {
		t.Skip("TestReport runs this scenario; -duplicates runs it alone")
	}
	results := duplicateScenarios(t, *duration)
	checkDuplicates(t, results)
	var buf bytes.Buffer
	if err := WriteDuplicates(&buf, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// duplicateScenarios measures, on every backend, how soon waiting
// duplicates of a running request learn its outcome: two guards over the
// same backend, each with its own client (memory: two guards over one
// store); the first request runs on guard A with a handler of 200 ms; as
// soon as it runs, N duplicates start, alternately on B and A, and wait
// with the guard's defaults (2 s wait budget, 25–250 ms back-off). A
// short run (no -report, no -duplicates) makes one trial per row and no
// warm-up.
func duplicateScenarios(t *testing.T, d time.Duration) []DupResult {
	full := *reportFile != "" || *duplicatesOnly
	backends := dupBackends(t)
	var results []DupResult
	for _, b := range backends {
		if full {
			// One trial at the largest N, not measured, so that every
			// pool has its connections before the first measured trial.
			warm := DupResult{}
			dupTrial(t.Context(), b, fmt.Sprint(testenv.Name(t), "-warm"), dupCounts[len(dupCounts)-1], &warm)
		}
		for _, n := range dupCounts {
			trials := 1
			if full {
				trials = max(int(d/dupTrialLength), (dupMinAnswers+n-1)/n)
			}
			r := DupResult{Backend: b.name, N: n, Trials: trials}
			prefix := testenv.Name(t)
			for i := range trials {
				dupTrial(t.Context(), b, fmt.Sprint(prefix, "-", i), n, &r)
			}
			slices.Sort(r.Delays)
			slices.Sort(r.Firsts)
			results = append(results, r)
		}
	}
	return results
}

// dupTrial runs one request and n duplicates of it under key, adding what
// it measured to r.
func dupTrial(ctx context.Context, b dupBackend, key string, n int, r *DupResult) {
	type order struct {
		Item     string `json:"item"`
		Quantity int    `json:"quantity"`
	}
	input := order{Item: "book", Quantity: 1}
	base := time.Now()
	var (
		runs    atomic.Int64
		ended   atomic.Int64 // the handler's end, in ns since base
		done    atomic.Int64 // the first request's answer, in ns since base
		started = make(chan struct{})
		mu      sync.Mutex
		wg      sync.WaitGroup
	)
	first := func(ctx context.Context) (string, error) {
		runs.Add(1)
		close(started)
		time.Sleep(dupHandler)
		ended.Store(int64(time.Since(base)))
		return key, nil
	}
	again := func(ctx context.Context) (string, error) {
		runs.Add(1)
		return "again", nil
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		v, replayed, err := middleware.Do(ctx, b.guards[0], key, input, first)
		done.Store(int64(time.Since(base)))
		if err != nil || replayed || v != key {
			fail("%s: the first request: %q, replayed %v, %v", b.name, v, replayed, err)
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		fail("%s: the first request never ran", b.name)
		wg.Wait()
		return
	}
	answers := make([]time.Duration, n) // since base; -1: no answer
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = -1
			v, replayed, err := middleware.Do(ctx, b.guards[(i+1)%2], key, input, again)
			at := time.Since(base)
			switch {
			case errors.Is(err, middleware.ErrInProgress):
				mu.Lock()
				r.InProgress++
				mu.Unlock()
			case err != nil || !replayed || v != key:
				fail("%s: duplicate %d: %q, replayed %v, %v", b.name, i, v, replayed, err)
			default:
				answers[i] = at
			}
		}()
	}
	wg.Wait()
	if got := runs.Load(); got != 1 {
		fail("%s: %d executions of one request with %d duplicates", b.name, got, n)
	}
	end := time.Duration(ended.Load())
	r.Firsts = append(r.Firsts, time.Duration(done.Load())-end)
	for _, at := range answers {
		if at >= 0 {
			r.Delays = append(r.Delays, at-end)
		}
	}
}

// dupBackends builds the two guards of every backend. Each Redis client
// has a pool of 64 connections per node and each PostgreSQL pool 32, as
// in the HTTP scenario; guards keep their defaults.
func dupBackends(t *testing.T) []dupBackend {
	ctx := t.Context()
	discard := slog.New(slog.DiscardHandler)
	newGuard := func(s store.Store) *middleware.Guard {
		g, err := middleware.New(s, middleware.WithLogger(discard))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	closer := func(c io.Closer) { t.Cleanup(func() { _ = c.Close() }) }
	var out []dupBackend

	mem := memstore.New()
	out = append(out, dupBackend{name: "memory (one store)", guards: [2]*middleware.Guard{newGuard(mem), newGuard(mem)}})

	redisPair := func(name string, newClient func() redis.UniversalClient) dupBackend {
		b := dupBackend{name: name}
		prefix := testenv.Name(t)
		for i := range b.guards {
			c := newClient()
			closer(c)
			s, err := redisstore.New(c, redisstore.WithKeyPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			b.guards[i] = newGuard(s)
		}
		return b
	}
	addr := testenv.Redis(t).Addr
	out = append(out, redisPair("Redis", func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
	}))
	addrs := testenv.RedisCluster(t).Addrs
	out = append(out, redisPair("Redis Cluster (3 masters)", func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64, ContextTimeoutEnabled: true})
	}))

	pg := dupBackend{name: "PostgreSQL"}
	table := pgstore.WithTable(testenv.Name(t) + "_records")
	for i := range pg.guards {
		pool, err := pgxpool.New(ctx, testenv.Postgres(t).URL+"&pool_max_conns=32")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if i == 0 {
			if err := pgstore.SetupSchema(ctx, pool, table); err != nil {
				t.Fatal(err)
			}
		}
		s, err := pgstore.New(pool, table, pgstore.WithLogger(discard))
		if err != nil {
			t.Fatal(err)
		}
		pg.guards[i] = newGuard(s)
	}
	out = append(out, pg)

	testenv.Firestore(t)
	fsb := dupBackend{name: "Firestore emulator"}
	project := testenv.FirestoreProject(t)
	for i := range fsb.guards {
		c, err := firestore.NewClient(ctx, project)
		if err != nil {
			t.Fatal(err)
		}
		closer(c)
		s, err := firestorestore.New(c, firestorestore.WithLogger(discard))
		if err != nil {
			t.Fatal(err)
		}
		fsb.guards[i] = newGuard(s)
	}
	out = append(out, fsb)
	return out
}

// checkDuplicates fails the test if a row saw an execution beyond the
// first, an error other than ErrInProgress or a wrong replay, or if a
// duplicate is unaccounted for.
func checkDuplicates(t *testing.T, results []DupResult) {
	t.Helper()
	for _, r := range results {
		for _, e := range r.Errors {
			t.Errorf("duplicates: %s", e)
		}
		if got, want := len(r.Delays)+r.InProgress+len(r.Errors), r.N*r.Trials; len(r.Errors) == 0 && got != want {
			t.Errorf("duplicates: %s, N=%d: %d answers and %d in progress, want %d in all", r.Backend, r.N, len(r.Delays), r.InProgress, want)
		}
	}
}

// WriteDuplicates writes the duplicates scenario as a markdown table.
func WriteDuplicates(w io.Writer, results []DupResult) error {
	if _, err := fmt.Fprintf(w, "\n### Duplicates of a running request (two guards, a %v handler)\n\n"+
		"| backend | duplicates | trials | replays | p50 after the handler | p99 | max | 409 (in progress) | the first's own answer, p50 / p99 |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", dupHandler); err != nil {
		return err
	}
	for _, r := range results {
		var worst time.Duration
		if len(r.Delays) > 0 {
			worst = r.Delays[len(r.Delays)-1]
		}
		if _, err := fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %s | %s | %d | %s / %s |\n", r.Backend, r.N, r.Trials, len(r.Delays),
			round(percentile(r.Delays, 0.50)), round(percentile(r.Delays, 0.99)), round(worst), r.InProgress,
			round(percentile(r.Firsts, 0.50)), round(percentile(r.Firsts, 0.99))); err != nil {
			return err
		}
	}
	return nil
}
