package otelsuite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/mysqlstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

// countingStore counts the calls made to the memory store it wraps.
type countingStore struct {
	store.Store
	n atomic.Int64
}

func (c *countingStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	c.n.Add(1)
	return c.Store.Claim(ctx, key, fp, ttl)
}

func (c *countingStore) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	c.n.Add(1)
	return c.Store.Extend(ctx, key, fence, ttl)
}

func (c *countingStore) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	c.n.Add(1)
	return c.Store.Complete(ctx, rec, ttl)
}

func (c *countingStore) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	c.n.Add(1)
	return c.Store.Release(ctx, key, fence)
}

func (c *countingStore) Get(ctx context.Context, key string) (store.Record, bool, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingStore) Delete(ctx context.Context, key string) (bool, error) {
	c.n.Add(1)
	return c.Store.Delete(ctx, key)
}

// commands is a go-redis hook that counts round trips: one per command
// sent on its own, one per pipeline.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// roundTrips are the round trips of a first execution and of a replay.
type roundTrips struct{ first, replay int64 }

// statements is a database/sql connector that counts the statements and
// prepares its connections send, each a round trip (mysqlstore sends every
// statement without arguments: one COM_QUERY).
type statements struct {
	driver.Connector
	n atomic.Int64
}

func (s *statements) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := s.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &s.n}, nil
}

type countedConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countedConn) Prepare(query string) (driver.Stmt, error) {
	c.n.Add(1)
	return c.Conn.Prepare(query)
}

func (c *countedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *countedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

// roundTripBackend opens a backend for one test and returns the count of
// what reached it so far; want is what a first execution and a replay
// cost on it.
type roundTripBackend struct {
	name string
	open func(t *testing.T) (s store.Store, count func() int64)
	want roundTrips
}

func roundTripBackends() []roundTripBackend {
	return []roundTripBackend{
		{"memory", func(t *testing.T) (store.Store, func() int64) {
			m := memstore.New()
			t.Cleanup(func() { _ = m.Close() })
			c := &countingStore{Store: m}
			return c, c.n.Load
		}, roundTrips{2, 1}},
		{"redis", func(t *testing.T) (store.Store, func() int64) {
			client := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			if err := client.Ping(t.Context()).Err(); err != nil { // connect first: the handshake is not the guard's
				t.Fatal(err)
			}
			var n commands
			client.AddHook(&n)
			s, err := redisstore.New(client, redisstore.WithKeyPrefix(testenv.Name(t)+":"))
			if err != nil {
				t.Fatal(err)
			}
			return s, n.n.Load
		}, roundTrips{2, 1}},
		// A replay's refused claim reads the item on dynalite, which does
		// not send it back with the refusal as DynamoDB does.
		{"dynamodb", func(t *testing.T) (store.Store, func() int64) {
			var n atomic.Int64
			client := dynamodb.New(dynamodb.Options{
				Region: "us-east-1", BaseEndpoint: aws.String(testenv.Dynamo(t).URL),
				Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
					return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
				}),
				HTTPClient: &http.Client{Transport: requestCounter{n: &n, next: http.DefaultTransport}},
			})
			table := dynamostore.WithTable(testenv.Name(t))
			if err := dynamostore.CreateTable(t.Context(), client, table); err != nil {
				t.Fatal(err)
			}
			s, err := dynamostore.New(client, table)
			if err != nil {
				t.Fatal(err)
			}
			return s, n.Load
		}, roundTrips{2, 2}},
		{"mysql", func(t *testing.T) (store.Store, func() int64) {
			cfg, err := mysql.ParseDSN(testenv.MySQL(t).DSN)
			if err != nil {
				t.Fatal(err)
			}
			connector, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			n := &statements{Connector: connector}
			db := sql.OpenDB(n)
			t.Cleanup(func() { _ = db.Close() })
			table := mysqlstore.WithTable(testenv.Name(t))
			if err := mysqlstore.SetupSchema(t.Context(), db, table); err != nil {
				t.Fatal(err)
			}
			s, err := mysqlstore.New(db, table)
			if err != nil {
				t.Fatal(err)
			}
			return s, n.n.Load
		}, roundTrips{2, 1}},
	}
}

// requestCounter counts the HTTP requests a client sends.
type requestCounter struct {
	n    *atomic.Int64
	next http.RoundTripper
}

func (c requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// TestNoAddedRoundTrip counts what reaches the backend for a first
// execution and for a replay, with the hook and the store decorator and
// without them: the same on memory, on a real Redis and on MariaDB (two
// and one) and on dynalite (two and two), and the decorator counts exactly
// the operations (a claim and a completion, a claim).
func TestNoAddedRoundTrip(t *testing.T) {
	for _, b := range roundTripBackends() {
		t.Run(b.name, func(t *testing.T) {
			type trips = roundTrips
			measure := func(t *testing.T, instrumented bool) (trips, *telemetry) {
				s, count := b.open(t)
				var tm *telemetry
				opts := []middleware.Option{middleware.WithLogger(discard())}
				var gs store.Store = s
				if instrumented {
					tm = newTelemetry(t)
					gs = tm.hook.Store(s)
					opts = append(opts, middleware.WithHook(tm.hook))
				}
				g, err := middleware.New(gs, opts...)
				if err != nil {
					t.Fatal(err)
				}
				// Warm up: the first use of a Redis server loads the
				// store's scripts (once per server), which no later call
				// repeats.
				for range 2 {
					if _, _, err := middleware.Do(t.Context(), g, "warm-up", 0, func(context.Context) (int, error) { return 0, nil }); err != nil {
						t.Fatal(err)
					}
				}
				var got trips
				for i := range 3 {
					key := fmt.Sprint("order-", i)
					before := count()
					if _, replayed, err := middleware.Do(t.Context(), g, key, i, func(context.Context) (int, error) { return i, nil }); err != nil || replayed {
						t.Fatalf("first execution: %v, replayed %v", err, replayed)
					}
					first := count() - before
					before = count()
					if v, replayed, err := middleware.Do(t.Context(), g, key, i, func(context.Context) (int, error) { return -1, nil }); err != nil || !replayed || v != i {
						t.Fatalf("replay: %v %v %v", v, replayed, err)
					}
					replay := count() - before
					if i > 0 && (trips{first, replay}) != got {
						t.Fatalf("round %d: %d and %d round trips, round 0: %+v", i, first, replay, got)
					}
					got = trips{first, replay}
				}
				return got, tm
			}
			off, _ := measure(t, false)
			on, tm := measure(t, true)
			t.Logf("without the hook: a first execution %d round trips, a replay %d; with it: %d and %d", off.first, off.replay, on.first, on.replay)
			if on != off {
				t.Fatalf("with the hook: %+v round trips; without: %+v", on, off)
			}
			if off != b.want {
				t.Fatalf("round trips %+v; want %d for a first execution and %d for a replay", off, b.want.first, b.want.replay)
			}
			m := tm.metrics(t)
			// The warm-up's two calls and three measured pairs, each a
			// claim and a completion, then a claim.
			if n, want := int64(m.total("idemkit.backend.operations")), int64(4*(2+1)); n != want {
				t.Fatalf("the decorator counted %d operations; the guard made %d", n, want)
			}
		})
	}
}
