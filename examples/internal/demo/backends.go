package demo

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"cloud.google.com/go/firestore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/lock/pglock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/memstore"
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
	Project     string
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&f.Addr, "addr", defaultAddr, "listen address")
	fs.StringVar(&f.Store, "store", "memory", "backend for locks and records: memory, redis, redis-cluster, postgres, firestore")
	fs.StringVar(&f.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address, with -store redis")
	fs.StringVar(&f.RedisAddrs, "redis-addrs", "", "comma-separated Redis Cluster node addresses, with -store redis-cluster")
	fs.StringVar(&f.PostgresURL, "postgres-url", "", "PostgreSQL connection URL, with -store postgres (the tables are created if missing)")
	fs.StringVar(&f.Project, "firestore-project", "", "Google Cloud project id, with -store firestore (FIRESTORE_EMULATOR_HOST points the client at an emulator)")
}

// Guard builds the guard on the chosen backends. It returns a function that
// closes them.
func (f *Flags) Guard(ctx context.Context, logger *slog.Logger, opts ...middleware.Option) (*middleware.Guard, func(), error) {
	s, l, closeBackends, err := f.backends(ctx, logger)
	if err != nil {
		return nil, nil, err
	}
	g, err := middleware.New(s, l, append([]middleware.Option{middleware.WithLogger(logger)}, opts...)...)
	if err != nil {
		closeBackends()
		return nil, nil, err
	}
	return g, closeBackends, nil
}

func (f *Flags) backends(ctx context.Context, logger *slog.Logger) (store.Store, lock.Locker, func(), error) {
	switch f.Store {
	case "memory":
		l := memlock.New(memlock.WithLogger(logger))
		return memstore.New(memstore.WithLocker(l)), l, func() {}, nil
	case "redis", "redis-cluster":
		var client redis.UniversalClient
		if f.Store == "redis" {
			client = redis.NewClient(&redis.Options{Addr: f.RedisAddr})
		} else {
			if f.RedisAddrs == "" {
				return nil, nil, nil, fmt.Errorf("-store redis-cluster needs -redis-addrs")
			}
			client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(f.RedisAddrs, ",")})
		}
		if err := client.Ping(ctx).Err(); err != nil {
			_ = client.Close()
			return nil, nil, nil, fmt.Errorf("redis: %w", err)
		}
		l, err := redislock.New(client, redislock.WithLogger(logger))
		if err != nil {
			_ = client.Close()
			return nil, nil, nil, err
		}
		s, err := redisstore.New(client, redisstore.WithLocker(l))
		if err != nil {
			_ = client.Close()
			return nil, nil, nil, err
		}
		return s, l, func() { _ = client.Close() }, nil
	case "postgres":
		if f.PostgresURL == "" {
			return nil, nil, nil, fmt.Errorf("-store postgres needs -postgres-url")
		}
		pool, err := pgxpool.New(ctx, f.PostgresURL)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("postgres: %w", err)
		}
		if err := pglock.SetupSchema(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, nil, err
		}
		if err := pgstore.SetupSchema(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, nil, err
		}
		l, err := pglock.New(pool, pglock.WithLogger(logger))
		if err != nil {
			pool.Close()
			return nil, nil, nil, err
		}
		s, err := pgstore.New(pool, pgstore.WithLogger(logger))
		if err != nil {
			pool.Close()
			return nil, nil, nil, err
		}
		return s, l, pool.Close, nil
	case "firestore":
		if f.Project == "" {
			return nil, nil, nil, fmt.Errorf("-store firestore needs -firestore-project")
		}
		client, err := firestore.NewClient(ctx, f.Project)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("firestore: %w", err)
		}
		l, err := firestorelock.New(client, firestorelock.WithLogger(logger))
		if err != nil {
			_ = client.Close()
			return nil, nil, nil, err
		}
		s, err := firestorestore.New(client, firestorestore.WithLogger(logger))
		if err != nil {
			_ = client.Close()
			return nil, nil, nil, err
		}
		return s, l, func() { _ = client.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("unknown -store %q (memory, redis, redis-cluster, postgres, firestore)", f.Store)
}
