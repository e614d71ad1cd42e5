package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"cloud.google.com/go/firestore"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/mysqlstore"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

// kind is a kind of backend.
type kind int

const (
	kindRedis kind = iota + 1
	kindPostgres
	kindMySQL
	kindFirestore
	kindDynamo
)

// target is a parsed backend URL: what to connect to, before connecting.
type target struct {
	kind kind

	// Redis: exactly one of them.
	redisNode     *redis.Options
	redisCluster  *redis.ClusterOptions
	redisFailover *redis.FailoverOptions

	pgURL string // PostgreSQL: the URL as it was given

	mysql *mysql.Config // MySQL and MariaDB

	project, database string // Firestore; database "" is the default one

	region, endpoint string // DynamoDB; "" for the AWS configuration's region, AWS's endpoint
}

// backend is an open backend.
type backend struct {
	store store.Store
	sweep func(context.Context) (int, error) // nil for Redis and DynamoDB, which expire records themselves
	close func()
}

// parseTarget parses a backend URL. Its errors never repeat the URL, which
// may hold a password.
func parseTarget(raw string) (*target, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, usagef("-url: want scheme://..., such as redis://localhost:6379/0 (see idemkit help)")
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(scheme + "://" + rest)
		if err != nil {
			return nil, usagef("-url: %v", hideURL(err))
		}
		o.ContextTimeoutEnabled = true
		return &target{kind: kindRedis, redisNode: o}, nil
	case "redis+cluster", "rediss+cluster":
		return parseCluster(strings.TrimSuffix(scheme, "+cluster"), rest)
	case "redis+sentinel", "rediss+sentinel":
		return parseSentinel(strings.TrimSuffix(scheme, "+sentinel"), rest)
	case "postgres", "postgresql":
		if _, err := pgxpool.ParseConfig(raw); err != nil {
			return nil, usagef("-url: not a PostgreSQL URL pgx accepts: %v", err) // pgx hides the password
		}
		return &target{kind: kindPostgres, pgURL: raw}, nil
	case "mysql", "mariadb":
		return parseMySQL(rest)
	case "firestore":
		return parseFirestore(rest)
	case "dynamodb":
		return parseDynamo(rest)
	}
	return nil, usagef("-url: unknown scheme %q; want redis, rediss, redis+cluster, redis+sentinel, postgres, mysql, firestore or dynamodb", scheme)
}

// hostList is the authority of a URL with several hosts:
// [userinfo@]host:port,host:port...
type hostList struct {
	userinfo string // with its '@', or ""
	hosts    []string
	path     string // from the first '/' on, before the query
	query    string // without its '?'
}

// splitHosts splits rest (a URL after its "scheme://") whose authority
// lists several host:port pairs, which net/url does not parse.
func splitHosts(rest string) (hostList, error) {
	var h hostList
	if strings.Contains(rest, "#") {
		return h, usagef("-url: a fragment (#) is not allowed; percent-encode '#' in a password as %%23")
	}
	rest, h.query, _ = strings.Cut(rest, "?")
	authority := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, h.path = rest[:i], rest[i:]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		h.userinfo, authority = authority[:i+1], authority[i+1:]
	}
	for _, hp := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" || port == "" {
			return h, usagef("-url: %q is not host:port", hp)
		}
		h.hosts = append(h.hosts, hp)
	}
	return h, nil
}

// url rebuilds a URL that go-redis parses: the first host in the
// authority, the others as addr parameters, and extra parameters.
func (h hostList) url(scheme, path string, extra url.Values) string {
	q := h.query
	for _, hp := range h.hosts[1:] {
		extra.Add("addr", hp)
	}
	if e := extra.Encode(); e != "" {
		if q != "" {
			q += "&"
		}
		q += e
	}
	u := scheme + "://" + h.userinfo + h.hosts[0] + path
	if q != "" {
		u += "?" + q
	}
	return u
}

// parseCluster parses redis+cluster://[user:pass@]host:port,host:port[?options].
func parseCluster(scheme, rest string) (*target, error) {
	h, err := splitHosts(rest)
	if err != nil {
		return nil, err
	}
	if h.path != "" && h.path != "/" {
		return nil, usagef("-url: a Redis Cluster has no databases: remove the path %q", h.path)
	}
	o, err := redis.ParseClusterURL(h.url(scheme, "", url.Values{}))
	if err != nil {
		return nil, usagef("-url: %v", hideURL(err))
	}
	o.ContextTimeoutEnabled = true
	return &target{kind: kindRedis, redisCluster: o}, nil
}

// parseSentinel parses
// redis+sentinel://[user:pass@]host:port,host:port/master-name[/db][?options].
// The user and password are the Sentinels'; the data nodes' go in the
// username and password parameters.
func parseSentinel(scheme, rest string) (*target, error) {
	h, err := splitHosts(rest)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.Trim(h.path, "/"), "/")
	if parts[0] == "" || len(parts) > 2 {
		return nil, usagef("-url: want redis+sentinel://host:port[,host:port...]/master-name[/db]")
	}
	master, err := url.PathUnescape(parts[0])
	if err != nil {
		return nil, usagef("-url: the master name: %v", err)
	}
	path := ""
	if len(parts) == 2 {
		if _, err := strconv.Atoi(parts[1]); err != nil {
			return nil, usagef("-url: the database %q is not a number", parts[1])
		}
		path = "/" + parts[1]
	}
	o, err := redis.ParseFailoverURL(h.url(scheme, path, url.Values{"master_name": {master}}))
	if err != nil {
		return nil, usagef("-url: %v", hideURL(err))
	}
	o.ContextTimeoutEnabled = true
	return &target{kind: kindRedis, redisFailover: o}, nil
}

// parseMySQL parses mysql://[user[:pass]@]host[:port]/database[?params],
// the params those of github.com/go-sql-driver/mysql's DSN (tls=true,
// timeout=5s, ...).
func parseMySQL(rest string) (*target, error) {
	u, err := url.Parse("mysql://" + rest)
	if err != nil {
		return nil, usagef("-url: %v", hideURL(err))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if u.Host == "" || db == "" || strings.Contains(db, "/") || u.Fragment != "" {
		return nil, usagef("-url: want mysql://[user[:pass]@]host[:port]/database[?params]")
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	// The DSN without its credentials: the driver's errors never see them.
	dsn := "tcp(" + addr + ")/" + db
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, usagef("-url: not a DSN the MySQL driver accepts: %v", err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return &target{kind: kindMySQL, mysql: cfg}, nil
}

// parseFirestore parses firestore://project-id[/database].
func parseFirestore(rest string) (*target, error) {
	u, err := url.Parse("firestore://" + rest)
	if err != nil {
		return nil, usagef("-url: %v", hideURL(err))
	}
	db := strings.Trim(u.Path, "/")
	switch {
	case u.Host == "":
		return nil, usagef("-url: want firestore://project-id[/database]")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(db, "/"):
		return nil, usagef("-url: want firestore://project-id[/database], nothing else (credentials come from the environment)")
	}
	return &target{kind: kindFirestore, project: u.Host, database: db}, nil
}

// parseDynamo parses dynamodb://[region][?endpoint=URL].
func parseDynamo(rest string) (*target, error) {
	u, err := url.Parse("dynamodb://" + rest)
	if err != nil {
		return nil, usagef("-url: %v", hideURL(err))
	}
	q := u.Query()
	endpoint := q.Get("endpoint")
	q.Del("endpoint")
	if u.User != nil || u.Fragment != "" || strings.Trim(u.Path, "/") != "" || len(q) > 0 {
		return nil, usagef("-url: want dynamodb://[region][?endpoint=URL], nothing else (credentials come from the AWS configuration)")
	}
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, usagef("-url: the endpoint must be an http:// or https:// URL")
		}
	}
	return &target{kind: kindDynamo, region: u.Host, endpoint: endpoint}, nil
}

// open connects to the target with the command's store options.
func (t *target) open(ctx context.Context, c *command) (*backend, error) {
	switch t.kind {
	case kindRedis:
		var client redis.UniversalClient
		switch {
		case t.redisCluster != nil:
			client = redis.NewClusterClient(t.redisCluster)
		case t.redisFailover != nil:
			client = redis.NewFailoverClient(t.redisFailover)
		default:
			client = redis.NewClient(t.redisNode)
		}
		var opts []redisstore.Option
		if c.prefix != "" {
			opts = append(opts, redisstore.WithKeyPrefix(c.prefix))
		}
		s, err := redisstore.New(client, opts...)
		if err != nil {
			_ = client.Close()
			return nil, optionError("-prefix", err)
		}
		return &backend{store: s, close: func() { _ = client.Close() }}, nil

	case kindPostgres:
		cfg, err := pgxpool.ParseConfig(t.pgURL)
		if err != nil {
			return nil, usagef("-url: %v", err)
		}
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		var opts []pgstore.Option
		if c.table != "" {
			opts = append(opts, pgstore.WithTable(c.table))
		}
		s, err := pgstore.New(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, optionError("-table", err)
		}
		return &backend{store: s, sweep: s.Sweep, close: pool.Close}, nil

	case kindDynamo:
		var opts []func(*config.LoadOptions) error
		if t.region != "" {
			opts = append(opts, config.WithRegion(t.region))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("load the AWS configuration: %w", err)
		}
		client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			if t.endpoint != "" {
				o.BaseEndpoint = aws.String(t.endpoint)
			}
		})
		var sopts []dynamostore.Option
		if c.table != "" {
			sopts = append(sopts, dynamostore.WithTable(c.table))
		}
		s, err := dynamostore.New(client, sopts...)
		if err != nil {
			return nil, optionError("-table", err)
		}
		return &backend{store: s, close: func() {}}, nil
	case kindMySQL:
		connector, err := mysql.NewConnector(t.mysql)
		if err != nil {
			return nil, usagef("-url: %v", err)
		}
		db := sql.OpenDB(connector)
		db.SetMaxOpenConns(2)
		var opts []mysqlstore.Option
		if c.table != "" {
			opts = append(opts, mysqlstore.WithTable(c.table))
		}
		s, err := mysqlstore.New(db, opts...)
		if err != nil {
			_ = db.Close()
			return nil, optionError("-table", err)
		}
		return &backend{store: s, sweep: s.Sweep, close: func() { _ = db.Close() }}, nil

	default:
		var client *firestore.Client
		var err error
		if t.database == "" {
			client, err = firestore.NewClient(ctx, t.project)
		} else {
			client, err = firestore.NewClientWithDatabase(ctx, t.project, t.database)
		}
		if err != nil {
			return nil, fmt.Errorf("connect to Firestore: %w", err)
		}
		var opts []firestorestore.Option
		if c.collection != "" {
			opts = append(opts, firestorestore.WithCollection(c.collection))
		}
		s, err := firestorestore.New(client, opts...)
		if err != nil {
			_ = client.Close()
			return nil, optionError("-collection", err)
		}
		return &backend{store: s, sweep: s.Sweep, close: func() { _ = client.Close() }}, nil
	}
}

// hideURL drops the URL from a *url.Error (it may hold a password).
func hideURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// optionError makes a store's refusal of its options a usage error
// naming the flag.
func optionError(flag string, err error) error {
	if idemkit.CodeOf(err) == idemkit.CodeInvalidArgument {
		return usagef("%s: %v", flag, err)
	}
	return err
}
