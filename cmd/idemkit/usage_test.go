package main

import (
	"strings"
	"testing"
	"time"
)

// TestUsage: bad command lines exit 2 (and say why on stderr) before any
// backend is reached; help exits 0.
func TestUsage(t *testing.T) {
	t.Setenv(urlEnv, "")
	const redisURL = "redis://127.0.0.1:1/0" // never dialled: every case fails before
	for _, c := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "usage:"},
		{"unknown command", []string{"purge"}, `unknown command "purge"`},
		{"unknown flag", []string{"inspect", "-kye", "k"}, "flag provided but not defined"},
		{"response on forget", []string{"forget", "-url", redisURL, "-key", "k", "-response"}, "flag provided but not defined"},
		{"force on inspect", []string{"inspect", "-url", redisURL, "-key", "k", "-force"}, "flag provided but not defined"},
		{"no url", []string{"inspect", "-key", "k"}, "-url is required"},
		{"no key", []string{"forget", "-url", redisURL}, "-key is required"},
		{"empty key", []string{"inspect", "-url", redisURL, "-key", ""}, "-key is required"},
		{"argument", []string{"inspect", "-url", redisURL, "-key", "k", "extra"}, `unexpected argument "extra"`},
		{"timeout", []string{"sweep", "-url", redisURL, "-timeout", "0s"}, "-timeout must be positive"},
		{"scheme", []string{"inspect", "-url", "mongodb://h/db", "-key", "k"}, `unknown scheme "mongodb"`},
		{"mysql database", []string{"inspect", "-url", "mysql://u:hunter2@h:3306", "-key", "k"}, "want mysql://"},
		{"mysql param", []string{"inspect", "-url", "mysql://u:hunter2@h:3306/db?timeout=soon", "-key", "k"}, "not a DSN the MySQL driver accepts"},
		{"collection on mysql", []string{"sweep", "-url", "mysql://h/db", "-collection", "c"}, "-collection applies to Firestore"},
		{"bad mysql table", []string{"inspect", "-url", "mysql://127.0.0.1:1/db", "-key", "k", "-table", "no such table!"}, "-table:"},
		{"no scheme", []string{"inspect", "-url", "localhost:6379", "-key", "k"}, "want scheme://"},
		{"redis port", []string{"inspect", "-url", "redis://user:hunter2@h:port/0", "-key", "k"}, "-url:"},
		{"redis db", []string{"inspect", "-url", "redis://h:1/x", "-key", "k"}, "invalid database number"},
		{"cluster path", []string{"inspect", "-url", "redis+cluster://h:1,h:2/1", "-key", "k"}, "no databases"},
		{"cluster host", []string{"inspect", "-url", "redis+cluster://h:1,,h:2", "-key", "k"}, "is not host:port"},
		{"sentinel master", []string{"inspect", "-url", "redis+sentinel://h:1,h:2", "-key", "k"}, "master-name"},
		{"sentinel db", []string{"inspect", "-url", "redis+sentinel://h:1/m/x", "-key", "k"}, "not a number"},
		{"firestore query", []string{"inspect", "-url", "firestore://p?x=1", "-key", "k"}, "nothing else"},
		{"firestore project", []string{"inspect", "-url", "firestore:///db", "-key", "k"}, "project-id"},
		{"postgres url", []string{"inspect", "-url", "postgres://u:hunter2@h:port/db", "-key", "k"}, "PostgreSQL URL"},
		{"dynamodb path", []string{"inspect", "-url", "dynamodb://eu-west-1/t", "-key", "k"}, "nothing else"},
		{"dynamodb option", []string{"inspect", "-url", "dynamodb://eu-west-1?x=1", "-key", "k"}, "nothing else"},
		{"dynamodb endpoint", []string{"inspect", "-url", "dynamodb://?endpoint=localhost:8000", "-key", "k"}, "http:// or https://"},
		{"bad dynamodb table", []string{"inspect", "-url", "dynamodb://eu-west-1", "-key", "k", "-table", "a/b"}, "-table:"},
		{"collection on dynamodb", []string{"inspect", "-url", "dynamodb://eu-west-1", "-key", "k", "-collection", "c"}, "-collection applies to Firestore"},
		{"table on redis", []string{"inspect", "-url", redisURL, "-key", "k", "-table", "t"}, "-table applies to PostgreSQL, MySQL and DynamoDB"},
		{"collection on postgres", []string{"sweep", "-url", "postgres://h/db", "-collection", "c"}, "-collection applies to Firestore"},
		{"prefix on firestore", []string{"forget", "-url", "firestore://p", "-key", "k", "-prefix", "p:"}, "-prefix applies to Redis"},
		{"bad table", []string{"inspect", "-url", "postgres://127.0.0.1:1/db", "-key", "k", "-table", "no such table!"}, "-table:"},
		{"bad prefix", []string{"inspect", "-url", redisURL, "-key", "k", "-prefix", "has space"}, "-prefix:"},
		{"bad namespace", []string{"inspect", "-url", redisURL, "-key", "k", "-namespace", "a:b"}, "-namespace:"},
		{"key too long", []string{"forget", "-url", redisURL, "-key", strings.Repeat("k", 2000)}, "-key:"},
		{"key on list", []string{"list", "-url", redisURL, "-key", "k"}, "flag provided but not defined"},
		{"raw on forget", []string{"forget", "-url", redisURL, "-key", "k", "-raw"}, "flag provided but not defined"},
		{"raw and json", []string{"inspect", "-url", redisURL, "-key", "k", "-raw", "-json"}, "-raw writes the response's bytes alone"},
		{"raw and response", []string{"inspect", "-url", redisURL, "-key", "k", "-raw", "-response"}, "-raw writes the response's bytes alone"},
		{"all scopes and scope", []string{"list", "-url", redisURL, "-all-scopes", "-scope", "t"}, "-all-scopes lists every scope"},
		{"all scopes and key prefix", []string{"list", "-url", redisURL, "-all-scopes", "-key-prefix", "a"}, "-all-scopes lists every scope"},
		{"limit 0", []string{"list", "-url", redisURL, "-limit", "0"}, "-limit must be 1 to 1000"},
		{"limit too high", []string{"list", "-url", redisURL, "-limit", "1001"}, "-limit must be 1 to 1000"},
		{"list argument", []string{"list", "-url", redisURL, "orders/"}, `unexpected argument "orders/"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := tool(t, c.args...)
			if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q on stderr", r.code, r.stdout, r.stderr, c.want)
			}
			if strings.Contains(r.stderr, "hunter2") {
				t.Fatalf("stderr shows the URL's password: %q", r.stderr)
			}
		})
	}
	for _, args := range [][]string{{"help"}, {"-h"}} {
		if r := tool(t, args...); r.code != exitOK || !strings.Contains(r.stdout, "idemkit inspect -url URL") {
			t.Fatalf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	if r := tool(t, "inspect", "-h"); r.code != exitOK || !strings.Contains(r.stderr, "-response") {
		t.Fatalf("inspect -h: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := tool(t, "forget", "-h"); r.code != exitOK || !strings.Contains(r.stderr, "-force") {
		t.Fatalf("forget -h: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := tool(t, "help"); !strings.Contains(r.stdout, "[-namespace NS] [-force] [-json]") || !strings.Contains(r.stdout, "unless -force is given") {
		t.Fatalf("help: %q; want forget's -force", r.stdout)
	}
	if r := tool(t, "help"); !strings.Contains(r.stdout, "idemkit list    -url URL [-scope SCOPE | -all-scopes] [-key-prefix P]") ||
		!strings.Contains(r.stdout, "[-response | -raw]") || !strings.Contains(r.stdout, `header's string form ("k1"`) ||
		!strings.Contains(r.stdout, "the next request with the key runs the work again") {
		t.Fatalf("help: %q; want list, -raw, the header form of keys and what forget means", r.stdout)
	}
	if r := tool(t, "list", "-h"); r.code != exitOK || !strings.Contains(r.stderr, "-after") || !strings.Contains(r.stderr, "-limit") ||
		!strings.Contains(r.stderr, "(default 100)") || strings.Contains(r.stderr, "-key ") {
		t.Fatalf("list -h: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := tool(t, "inspect", "-h"); !strings.Contains(r.stderr, "-raw") || !strings.Contains(r.stderr, `"k1"`) {
		t.Fatalf("inspect -h: stderr %q; want -raw and the header form of keys", r.stderr)
	}
}

// TestURLFromEnvironment: -url defaults to $IDEMKIT_URL.
func TestURLFromEnvironment(t *testing.T) {
	t.Setenv(urlEnv, "redis://127.0.0.1:1/0")
	r := tool(t, "sweep")
	if r.code != exitOK || !strings.Contains(r.stdout, "nothing to sweep") {
		t.Fatalf("sweep with $%s: exit %d, stdout %q, stderr %q", urlEnv, r.code, r.stdout, r.stderr)
	}
}

// TestParseTarget checks the clients the URLs of each Redis deployment
// make (every one bounded by ctx), and the Firestore project and database.
func TestParseTarget(t *testing.T) {
	node, err := parseTarget("rediss://u:p@cache:6380/2?dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	if o := node.redisNode; o == nil || o.Addr != "cache:6380" || o.DB != 2 || o.Username != "u" || o.Password != "p" ||
		o.TLSConfig == nil || o.DialTimeout != 3*time.Second || !o.ContextTimeoutEnabled {
		t.Fatalf("rediss:// options %+v", node.redisNode)
	}

	cl, err := parseTarget("redis+cluster://u:p@h1:7000,h2:7001,[::1]:7002/?read_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if o := cl.redisCluster; o == nil || strings.Join(o.Addrs, " ") != "h1:7000 h2:7001 [::1]:7002" || o.Username != "u" || o.Password != "p" ||
		o.TLSConfig != nil || o.ReadTimeout != 2*time.Second || !o.ContextTimeoutEnabled {
		t.Fatalf("redis+cluster:// options %+v", cl.redisCluster)
	}
	if cl, err := parseTarget("rediss+cluster://h1:7000,h2:7001"); err != nil || cl.redisCluster.TLSConfig == nil {
		t.Fatalf("rediss+cluster://: %v", err)
	}

	se, err := parseTarget("redis+sentinel://su:sp@s1:26379,s2:26380/my%2Fmaster/3?password=mp")
	if err != nil {
		t.Fatal(err)
	}
	if o := se.redisFailover; o == nil || strings.Join(o.SentinelAddrs, " ") != "s1:26379 s2:26380" || o.MasterName != "my/master" ||
		o.DB != 3 || o.SentinelUsername != "su" || o.SentinelPassword != "sp" || o.Password != "mp" || o.TLSConfig != nil || !o.ContextTimeoutEnabled {
		t.Fatalf("redis+sentinel:// options %+v", se.redisFailover)
	}
	if se, err := parseTarget("rediss+sentinel://s1:26379/m"); err != nil || se.redisFailover.TLSConfig == nil || se.redisFailover.DB != 0 {
		t.Fatalf("rediss+sentinel://: %v", err)
	}

	fs, err := parseTarget("firestore://my-project/audit-db")
	if err != nil || fs.kind != kindFirestore || fs.project != "my-project" || fs.database != "audit-db" {
		t.Fatalf("firestore:// target %+v, %v", fs, err)
	}
	dy, err := parseTarget("dynamodb://eu-west-1?endpoint=http://127.0.0.1:8000")
	if err != nil || dy.kind != kindDynamo || dy.region != "eu-west-1" || dy.endpoint != "http://127.0.0.1:8000" {
		t.Fatalf("dynamodb:// target %+v, %v", dy, err)
	}
	pg, err := parseTarget("postgresql://u@db:5432/app?sslmode=disable")
	if err != nil || pg.kind != kindPostgres {
		t.Fatalf("postgresql:// target %+v, %v", pg, err)
	}
	my, err := parseTarget("mysql://app:p%40ss:w%2Frd@db.internal/orders?timeout=5s")
	if err != nil || my.kind != kindMySQL || my.mysql.User != "app" || my.mysql.Passwd != "p@ss:w/rd" ||
		my.mysql.Addr != "db.internal:3306" || my.mysql.DBName != "orders" || my.mysql.Timeout != 5*time.Second {
		t.Fatalf("mysql:// target %+v, %v", my, err)
	}
}

// TestQuote: printable keys are shown as they are, others quoted so that
// they cannot drive a terminal.
func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"order/42":    "order/42",
		"ключ":        "ключ",
		"":            `""`,
		"a\x1b[2Jb":   `"a\x1b[2Jb"`,
		"bad\xffutf8": `"bad\xffutf8"`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s; want %s", in, got, want)
		}
	}
}
