package cli

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"cloud.google.com/go/firestore"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/mysqlstore"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

// Flags are the backend flags every demo server shares.
type Flags struct {
	Addr        string
	Store       string
	RedisAddr   string
	RedisAddrs  string
	PostgresURL string
	MySQLDSN    string
	Project     string
	DynamoURL   string
	Metrics     bool
	Faults      bool
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&f.Addr, "addr", defaultAddr, "listen address")
	fs.StringVar(&f.Store, "store", "memory", "the guard's backend: memory, redis, redis-cluster, postgres, mysql, firestore, dynamodb")
	fs.StringVar(&f.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address, with -store redis")
	fs.StringVar(&f.RedisAddrs, "redis-addrs", "", "comma-separated Redis Cluster node addresses, with -store redis-cluster")
	fs.StringVar(&f.PostgresURL, "postgres-url", "", "PostgreSQL connection URL, with -store postgres (the tables are created if missing)")
	fs.StringVar(&f.MySQLDSN, "mysql-dsn", "", "MySQL or MariaDB DSN (go-sql-driver/mysql's form, user:password@tcp(host:port)/db), with -store mysql (the table is created if missing)")
	fs.StringVar(&f.Project, "firestore-project", "", "Google Cloud project id, with -store firestore (FIRESTORE_EMULATOR_HOST points the client at an emulator)")
	fs.StringVar(&f.DynamoURL, "dynamodb-endpoint", "", "DynamoDB endpoint URL, with -store dynamodb (default: AWS's, for the region of the AWS configuration; credentials and region come from it; the table is created if missing)")
	fs.BoolVar(&f.Metrics, "metrics", false, "serve the guard's metrics (Prometheus text format) at /metrics on the demo's own address")
	fs.BoolVar(&f.Faults, "faults", false, "enable the demo's crash switches: POST /checkout?crash=after-reserve (or after-charge) ends the process once that step is recorded")
}

// Guard builds the guard on the chosen backend and checks that the
// backend can serve it (Guard.Check: reachable, its tables there, the
// permissions its writes need), so that a demo refuses to start with the
// fix in its error rather than answer every request with an error. A hook
// that is not nil observes the guard and, through its store decorator,
// the backend. It returns a function that closes the backend.
func (f *Flags) Guard(ctx context.Context, logger *slog.Logger, hook *idemkitotel.Hook, opts ...middleware.Option) (*middleware.Guard, func(), error) {
	s, closeBackend, err := f.backend(ctx, logger)
	if err != nil {
		return nil, nil, err
	}
	opts = append([]middleware.Option{middleware.WithLogger(logger)}, opts...)
	if hook != nil {
		s = hook.Store(s)
		opts = append(opts, middleware.WithHook(hook))
	}
	g, err := middleware.New(s, opts...)
	if err != nil {
		closeBackend()
		return nil, nil, err
	}
	if err := g.Check(ctx); err != nil {
		closeBackend()
		return nil, nil, err
	}
	return g, closeBackend, nil
}

// backend builds the one backend the -store flag names: records that
// carry their own lease, on that engine. PostgreSQL, MySQL and Firestore
// get a sweeper that deletes what expired (Redis and DynamoDB expire
// records themselves, and the memory store sweeps as it goes).
func (f *Flags) backend(ctx context.Context, logger *slog.Logger) (store.Store, func(), error) {
	switch f.Store {
	case "memory":
		s := memstore.New()
		return s, func() { _ = s.Close() }, nil
	case "redis", "redis-cluster":
		// ContextTimeoutEnabled makes every command respect its ctx's
		// deadline, so a stalled server is an error within the guard's op
		// timeout, never a hang; redisstore refuses a client without it.
		var client redis.UniversalClient
		if f.Store == "redis" {
			client = redis.NewClient(&redis.Options{Addr: f.RedisAddr, ContextTimeoutEnabled: true})
		} else {
			if f.RedisAddrs == "" {
				return nil, nil, fmt.Errorf("-store redis-cluster needs -redis-addrs")
			}
			client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(f.RedisAddrs, ","), ContextTimeoutEnabled: true})
		}
		s, err := redisstore.New(client)
		if err != nil {
			_ = client.Close()
			return nil, nil, err
		}
		return s, func() { _ = client.Close() }, nil
	case "postgres":
		if f.PostgresURL == "" {
			return nil, nil, fmt.Errorf("-store postgres needs -postgres-url")
		}
		pool, err := pgxpool.New(ctx, f.PostgresURL)
		if err != nil {
			return nil, nil, fmt.Errorf("postgres: %w", err)
		}
		if err := pgstore.SetupSchema(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, err
		}
		s, err := pgstore.New(pool)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		stop := s.StartSweeper(ctx, 0)
		return s, func() { stop(); pool.Close() }, nil
	case "mysql":
		if f.MySQLDSN == "" {
			return nil, nil, fmt.Errorf("-store mysql needs -mysql-dsn")
		}
		cfg, err := mysql.ParseDSN(f.MySQLDSN)
		if err != nil {
			return nil, nil, fmt.Errorf("mysql: %w", err)
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("mysql: %w", err)
		}
		db := sql.OpenDB(connector)
		if err := mysqlstore.SetupSchema(ctx, db); err != nil {
			_ = db.Close()
			return nil, nil, err
		}
		s, err := mysqlstore.New(db, mysqlstore.WithLogger(logger))
		if err != nil {
			_ = db.Close()
			return nil, nil, err
		}
		stop := s.StartSweeper(ctx, 0)
		return s, func() { stop(); _ = db.Close() }, nil
	case "firestore":
		if f.Project == "" {
			return nil, nil, fmt.Errorf("-store firestore needs -firestore-project")
		}
		client, err := firestore.NewClient(ctx, f.Project)
		if err != nil {
			return nil, nil, fmt.Errorf("firestore: %w", err)
		}
		s, err := firestorestore.New(client, firestorestore.WithLogger(logger))
		if err != nil {
			_ = client.Close()
			return nil, nil, err
		}
		stop := s.StartSweeper(ctx, 0)
		return s, func() { stop(); _ = client.Close() }, nil
	case "dynamodb":
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("dynamodb: %w", err)
		}
		client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			if f.DynamoURL != "" {
				o.BaseEndpoint = aws.String(f.DynamoURL)
			}
		})
		if err := dynamostore.CreateTable(ctx, client); err != nil {
			return nil, nil, err
		}
		s, err := dynamostore.New(client)
		if err != nil {
			return nil, nil, err
		}
		return s, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown -store %q (memory, redis, redis-cluster, postgres, mysql, firestore, dynamodb)", f.Store)
}
