package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	_ "github.com/go-sql-driver/mysql"
	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/mysqlstore"
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
	results := httpScenarios(t, *duration)
	checkHTTP(t, results)
	var buf bytes.Buffer
	if err := WriteHTTP(&buf, results); err != nil {
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

// httpScenarios loads the demo handler through real loopback connections
// from a load generator process of its own (see [runLoad]): on net/http,
// bare and behind the middleware on memory, Redis, PostgreSQL, Firestore,
// MySQL (MariaDB) and DynamoDB (dynalite), and on Fiber v3, bare and behind its idempotency middleware on
// its memory storage and on Redis; unique keys (every request a first
// execution), then all requests retries of one key (replays). Redis (one
// server for both libraries) runs with appendonly yes and appendfsync
// everysec; its CPU per request is measured on the rows that use it.
func httpScenarios(t *testing.T, d time.Duration) []HTTPResult {
	ctx := t.Context()
	redisSrv := testenv.NewRedis(t, "--appendfsync", "everysec")
	newRedis := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rdb := newRedis()
	rs, err := redisstore.New(rdb, redisstore.WithKeyPrefix(testenv.Name(t)))
	if err != nil {
		t.Fatal(err)
	}
	fiberRedis := fiberredis.NewFromConnection(newRedis())
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
	ds := dynamoStore(t)
	ms := mysqlStore(t)

	type config struct {
		name  string
		bare  int                                          // the row of its own framework's bare handler
		serve func(t *testing.T) (url string, stop func()) // a server for one round
		meter cpuMeter                                     // Redis's CPU, on the rows that use it
	}
	configs := []config{
		{name: "net/http, bare handler (no middleware)", bare: 0, serve: netHTTPServer(nil)},
		{name: "fiber (bare)", bare: 1, serve: fiberServer(false, nil)},
		{name: "middleware, memory", bare: 0, serve: netHTTPServer(func() store.Store { return memstore.New() })},
		{name: "fiber idempotency, memory", bare: 1, serve: fiberServer(true, nil)},
		{name: "middleware, Redis (appendfsync everysec)", bare: 0, serve: netHTTPServer(func() store.Store { return rs }), meter: redisCPU(rdb)},
		{name: "fiber idempotency, Redis (appendfsync everysec)", bare: 1, serve: fiberServer(true, fiberRedis), meter: redisCPU(rdb)},
		{name: "middleware, PostgreSQL (fsync off)", bare: 0, serve: netHTTPServer(func() store.Store { return ps })},
		{name: "middleware, Firestore emulator", bare: 0, serve: netHTTPServer(func() store.Store { return fs })},
		{name: "middleware, MySQL (MariaDB)", bare: 0, serve: netHTTPServer(func() store.Store { return ms })},
		{name: "middleware, DynamoDB (dynalite)", bare: 0, serve: netHTTPServer(func() store.Store { return ds })},
	}
	body := `{"item":"book","quantity":1}`
	// Each mode runs in rounds, every configuration once a round, so that
	// the slow drifts of a shared machine hit every row alike; a row adds
	// up its rounds (its p50 is the median of theirs, its p99 the worst).
	const rounds = 3
	salt := uint32(time.Now().UnixNano())
	var results []HTTPResult
	for mi, mode := range []string{"unique keys", "retries of one key"} {
		perConfig := make([][]Result, len(configs))
		cpu := make([]time.Duration, len(configs))
		for round := range rounds {
			for ci, c := range configs {
				url, stop := c.serve(t)
				spec := loadSpec{URL: url + "/orders", Workers: 16, Duration: d / rounds, OneKey: mode != "unique keys", Body: body,
					KeyPrefix: fmt.Sprintf("%08x-%04x-%04x-", salt, round, ci<<1|mi)}
				r, used, err := measured(ctx, c.meter, func() Result {
					r, err := runLoad(ctx, spec)
					if err != nil {
						t.Error(err)
					}
					return r
				})
				stop()
				if err != nil {
					t.Fatalf("%s: Redis's CPU: %v", c.name, err)
				}
				perConfig[ci] = append(perConfig[ci], r)
				cpu[ci] += used
			}
		}
		for ci, c := range configs {
			r := HTTPResult{Result: combine(perConfig[ci])}
			r.Group, r.Subject, r.Mode = "HTTP demo under load (16 clients, keep-alive)", c.name, mode
			if b := combine(perConfig[c.bare]).OpsPerSec(); b > 0 {
				r.VsBare = r.OpsPerSec() / b
			}
			if c.meter != nil {
				r.RedisCPU = perCycle(cpu[ci], perConfig[ci])
			}
			results = append(results, r)
		}
	}
	return results
}

// checkHTTP fails the test when a row made no requests, had errors, or
// has no Redis CPU figure where Redis serves it.
func checkHTTP(t *testing.T, results []HTTPResult) {
	t.Helper()
	for _, r := range results {
		if r.Ops == 0 || r.Errors > 0 {
			t.Errorf("%s / %s: %d requests, %d errors", r.Subject, r.Mode, r.Ops, r.Errors)
		}
		if strings.Contains(r.Subject, "Redis") && r.RedisCPU <= 0 {
			t.Errorf("%s / %s: no Redis CPU measured", r.Subject, r.Mode)
		}
	}
}

// HTTPResult is a row of the HTTP table.
type HTTPResult struct {
	Result
	VsBare   float64       // throughput over the bare handler's of the same framework, same rounds
	RedisCPU time.Duration // Redis's CPU per request; 0 on the rows without Redis
}

// WriteHTTP writes the HTTP table: each row's throughput relative to the
// first row (net/http's bare handler) and to its own framework's bare
// handler, and Redis's CPU per request where Redis serves the row.
func WriteHTTP(w io.Writer, results []HTTPResult) error {
	if len(results) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(w, "\n### %s\n\n| subject | mode | workers | ops/s | vs net/http bare | vs own bare | p50 | p99 | errors | Redis CPU per request |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", results[0].Group); err != nil {
		return err
	}
	first := map[string]float64{}
	for _, r := range results {
		if _, ok := first[r.Mode]; !ok {
			first[r.Mode] = r.OpsPerSec()
		}
		vsFirst := "—"
		if b := first[r.Mode]; b > 0 {
			vsFirst = fmt.Sprintf("%.2f×", r.OpsPerSec()/b)
		}
		if _, err := fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s | %.2f× | %s | %s | %d | %s |\n", r.Subject, r.Mode, r.Workers,
			r.OpsPerSec(), vsFirst, r.VsBare, round(r.P50), round(r.P99), r.Errors, cpuCell(r.RedisCPU)); err != nil {
			return err
		}
	}
	return nil
}

// netHTTPServer serves the demo handler on net/http, behind the
// middleware on the store s gives (nil: bare), a new guard for each round
// (and on memory a new store, as Fiber's middleware has a new storage).
func netHTTPServer(s func() store.Store) func(t *testing.T) (string, func()) {
	return func(t *testing.T) (string, func()) {
		var h http.Handler = &orders{}
		if s != nil {
			g, err := middleware.New(s(), middleware.WithLogger(slog.New(slog.DiscardHandler)))
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
		return srv.URL, srv.Close
	}
}

// fiberServer serves the demo handler on Fiber v3, behind its idempotency
// middleware when idempotent (with the header the clients send, and
// otherwise its defaults: an in-process lock per key, a 30-minute
// lifetime) on storage (nil: its own memory storage, new each round).
func fiberServer(idempotent bool, storage fiber.Storage) func(t *testing.T) (string, func()) {
	return func(t *testing.T) (string, func()) {
		app := fiber.New()
		if idempotent {
			app.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Storage: storage}))
		}
		o := &orders{}
		app.Post("/orders", o.fiber)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
		return "http://" + ln.Addr().String(), func() {
			if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
				t.Errorf("fiber: shutdown: %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("fiber: %v", err)
			}
		}
	}
}

// fiber is the demo's handler on Fiber: the same work and the same JSON in
// and out as ServeHTTP.
func (o *orders) fiber(c fiber.Ctx) error {
	n := o.n.Add(1)
	body := c.Body()
	c.Set("Content-Type", "application/json")
	c.Set("Location", fmt.Sprintf("/orders/%d", n))
	c.Status(http.StatusCreated)
	return json.NewEncoder(c).Encode(map[string]any{"order": n, "request": json.RawMessage(body)})
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

// dynamoStore returns a store on the shared dynalite, in a table of the
// test's own.
func dynamoStore(t *testing.T) store.Store {
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(testenv.Dynamo(t).URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench"}, nil
		}),
	})
	table := dynamostore.WithTable(testenv.Name(t))
	if err := dynamostore.CreateTable(t.Context(), client, table); err != nil {
		t.Fatal(err)
	}
	s, err := dynamostore.New(client, table)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mysqlStore returns a store on the shared MariaDB, in a table of the
// test's own.
func mysqlStore(t *testing.T) store.Store {
	db, err := sql.Open("mysql", testenv.MySQL(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() { _ = db.Close() })
	table := mysqlstore.WithTable(testenv.Name(t))
	if err := mysqlstore.SetupSchema(t.Context(), db, table); err != nil {
		t.Fatal(err)
	}
	s, err := mysqlstore.New(db, table)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
