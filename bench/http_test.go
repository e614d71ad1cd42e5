package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

var httpOnly = flag.Bool("http", false,
	"TestHTTP: run the HTTP scenarios alone, sized by -duration, and print their table")

// TestHTTP runs the HTTP scenarios alone, sized by -duration, when given
// -http (TestReport runs them with the others):
//
//	go test -count=1 -run '^TestHTTP$' -timeout 30m . -args -http -duration=3s
func TestHTTP(t *testing.T) {
	if !*httpOnly {
		t.Skip("TestReport runs these scenarios; -http runs them alone")
	}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, httpScenarios(t, *duration)); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// orders is the demo's business handler: it counts executions and answers
// 201 with a Location and a small JSON body.
type orders struct{ n atomic.Int64 }

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.n.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"order": n, "request": json.RawMessage(body)})
}

// httpScenarios loads the demo handler through real loopback connections,
// bare and behind the middleware on memory, Redis, PostgreSQL and
// Firestore: unique keys (every request a first execution), then all
// requests retries of one key (replays).
func httpScenarios(t *testing.T, d time.Duration) []Result {
	ctx := t.Context()
	const workers = 16
	rdb := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(t).Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	rs, err := redisstore.New(rdb, redisstore.WithKeyPrefix(testenv.Name(t)))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, testenv.Postgres(t).URL+"&pool_max_conns=32")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := pgstore.WithTable(testenv.Name(t) + "_records")
	if err := pgstore.SetupSchema(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	ps, err := pgstore.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Firestore(t)
	fc, err := firestore.NewClient(ctx, testenv.FirestoreProject(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.Close() })
	fs, err := firestorestore.New(fc)
	if err != nil {
		t.Fatal(err)
	}

	type config struct {
		name  string
		store store.Store
	}
	configs := []config{
		{name: "bare handler (no middleware)"},
		{name: "middleware, memory", store: memstore.New()},
		{name: "middleware, Redis (appendfsync always)", store: rs},
		{name: "middleware, PostgreSQL (fsync off)", store: ps},
		{name: "middleware, Firestore emulator", store: fs},
	}
	body := `{"item":"book","quantity":1}`
	// Each mode runs in rounds, every configuration once a round, so that
	// the slow drifts of a shared machine hit every row alike; a row adds
	// up its rounds (its p50 is the median of theirs, its p99 the worst).
	const rounds = 3
	var results []Result
	for _, mode := range []string{"unique keys", "retries of one key"} {
		perConfig := make([][]Result, len(configs))
		for round := range rounds {
			for ci, c := range configs {
				var h http.Handler = &orders{}
				if c.store != nil {
					g, err := middleware.New(c.store, middleware.WithLogger(slog.New(slog.DiscardHandler)))
					if err != nil {
						t.Fatal(err)
					}
					idem, err := nethttp.New(g, nethttp.WithLogger(slog.New(slog.DiscardHandler)))
					if err != nil {
						t.Fatal(err)
					}
					h = idem(h)
				}
				srv := httptest.NewServer(h)
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
				keyPrefix := fmt.Sprint(testenv.Name(t), "-", round, "-")
				r := Run(ctx, workers, d/rounds, func(ctx context.Context, w, i int) error {
					key := keyPrefix + "one"
					if mode == "unique keys" {
						key = fmt.Sprint(keyPrefix, w, "-", i)
					}
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
					if err != nil {
						return err
					}
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", key)
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						return fmt.Errorf("status %d", resp.StatusCode)
					}
					return nil
				})
				client.CloseIdleConnections()
				srv.Close()
				perConfig[ci] = append(perConfig[ci], r)
			}
		}
		for ci, c := range configs {
			r := combine(perConfig[ci])
			r.Group, r.Subject, r.Mode = "HTTP demo under load (16 clients, keep-alive)", c.name, mode
			results = append(results, r)
		}
	}
	return results
}

// combine adds up the rounds of one row: operations, errors and time are
// summed, the p50 is the median of the rounds' and the p99 the worst.
func combine(rs []Result) Result {
	var out Result
	p50s := make([]time.Duration, 0, len(rs))
	for _, r := range rs {
		out.Workers = r.Workers
		out.Ops += r.Ops
		out.Errors += r.Errors
		out.Elapsed += r.Elapsed
		out.P99 = max(out.P99, r.P99)
		p50s = append(p50s, r.P50)
	}
	slices.Sort(p50s)
	if len(p50s) > 0 {
		out.P50 = p50s[len(p50s)/2]
	}
	return out
}
