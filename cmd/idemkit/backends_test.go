package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/mysqlstore"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/idemkit/idemkit/store/redisstore"
)

// env is one backend as the tests use it: the application's store, and
// the tool's command line for the same records.
type env struct {
	store store.Store // the application's store
	flags []string    // -url and the store's flags, for the tool
	ns    string      // the namespace of the test's guards, its own
	// held reports whether the backend still holds anything (a row, a
	// document) under recordKey, live or not; nil for Redis, which
	// expires its keys itself.
	held func(t *testing.T, recordKey string) bool
}

// backendCase is a way to reach a real backend.
type backendCase struct {
	name  string
	setup func(t *testing.T) env
}

// backends are the real servers testenv starts: Redis as a single node (a
// key prefix set) and as a cluster, PostgreSQL and MariaDB (a table of the
// test's own), the Firestore emulator (a project of the test's own, another
// collection) and dynalite (a table of the test's own).
var backends = []backendCase{
	{"redis", func(t *testing.T) env {
		addr := testenv.Redis(t).Addr
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.WithKeyPrefix("ops:"))
		if err != nil {
			t.Fatal(err)
		}
		return env{store: s, flags: []string{"-url", "redis://" + addr + "/0", "-prefix", "ops:"}, ns: testenv.Name(t)}
	}},
	{"redis-cluster", func(t *testing.T) env {
		addrs := testenv.RedisCluster(t).Addrs
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return env{store: s, flags: []string{"-url", "redis+cluster://" + strings.Join(addrs, ",")}, ns: testenv.Name(t)}
	}},
	{"postgres", func(t *testing.T) env {
		u := testenv.Postgres(t).URL
		pool, err := pgxpool.New(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		table := testenv.Name(t)
		if err := pgstore.SetupSchema(t.Context(), pool, pgstore.WithTable(table)); err != nil {
			t.Fatal(err)
		}
		// No clock step: an expired record may go at its expiry (TestSweep).
		s, err := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithMaxClockStep(0))
		if err != nil {
			t.Fatal(err)
		}
		held := func(t *testing.T, recordKey string) bool {
			var n int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM "`+table+`" WHERE key = $1`, recordKey).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
		return env{store: s, flags: []string{"-url", u, "-table", table}, ns: testenv.Name(t), held: held}
	}},
	{"mysql", func(t *testing.T) env {
		cfg, err := mysql.ParseDSN(testenv.MySQL(t).DSN)
		if err != nil {
			t.Fatal(err)
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(connector)
		t.Cleanup(func() { _ = db.Close() })
		table := testenv.Name(t)
		if err := mysqlstore.SetupSchema(t.Context(), db, mysqlstore.WithTable(table)); err != nil {
			t.Fatal(err)
		}
		// No clock step: an expired record may go at its expiry (TestSweep).
		s, err := mysqlstore.New(db, mysqlstore.WithTable(table), mysqlstore.WithMaxClockStep(0))
		if err != nil {
			t.Fatal(err)
		}
		held := func(t *testing.T, recordKey string) bool {
			var n int
			if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM `"+table+"` WHERE record_key = ?", []byte(recordKey)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
		u := "mysql://" + cfg.User + "@" + cfg.Addr + "/" + cfg.DBName
		return env{store: s, flags: []string{"-url", u, "-table", table}, ns: testenv.Name(t), held: held}
	}},
	{"firestore", func(t *testing.T) env {
		testenv.Firestore(t) // sets FIRESTORE_EMULATOR_HOST, which the tool's client follows
		project := testenv.FirestoreProject(t)
		c, err := firestore.NewClient(context.Background(), project)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		const collection = "ops_records"
		s, err := firestorestore.New(c, firestorestore.WithCollection(collection), firestorestore.WithMaxClockStep(0))
		if err != nil {
			t.Fatal(err)
		}
		held := func(t *testing.T, recordKey string) bool {
			docs, err := c.Collection(collection).Documents(t.Context()).GetAll()
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				if d.Ref.ID == recordKey { // a readable key is its own document id
					return true
				}
			}
			return false
		}
		return env{store: s, flags: []string{"-url", "firestore://" + project, "-collection", collection}, ns: testenv.Name(t), held: held}
	}},
	{"dynamodb", func(t *testing.T) env {
		url := testenv.Dynamo(t).URL
		dynamoCredentials.Do(func() {
			// The tool's AWS configuration comes from the environment;
			// dynalite checks that requests are signed, not by whom.
			for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
				if os.Getenv(k) == "" {
					_ = os.Setenv(k, v)
				}
			}
		})
		client := dynamodb.New(dynamodb.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(url),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
			}),
		})
		table := testenv.Name(t)
		if err := dynamostore.CreateTable(t.Context(), client, dynamostore.WithTable(table)); err != nil {
			t.Fatal(err)
		}
		s, err := dynamostore.New(client, dynamostore.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		return env{store: s, flags: []string{"-url", "dynamodb://us-east-1?endpoint=" + url, "-table", table}, ns: testenv.Name(t)}
	}},
}

var dynamoCredentials sync.Once

// eachBackend runs f on every backend, in parallel subtests.
func eachBackend(t *testing.T, f func(t *testing.T, e env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.setup(t))
		})
	}
}

// guard returns a guard of the application over e's store, in e's
// namespace.
func (e env) guard(t *testing.T) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(e.store, middleware.WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// args returns the tool's command line for cmd on e, then more.
func (e env) args(cmd string, more ...string) []string {
	args := append([]string{cmd}, e.flags...)
	if cmd != "sweep" {
		args = append(args, "-namespace", e.ns)
	}
	return append(args, more...)
}

// order is the input of the tests' guarded calls.
var order = fingerprintOf(map[string]any{"item": "book"})

func fingerprintOf(v any) fingerprint.Fingerprint {
	fp, err := fingerprint.Value(v)
	if err != nil {
		panic(err)
	}
	return fp
}

// counted returns work that counts its runs in n and answers res.
func counted(n *atomic.Int32, res middleware.Result) middleware.Func {
	return func(context.Context) (middleware.Result, error) {
		n.Add(1)
		return res, nil
	}
}

// TestInspectForget writes a record through a real guard, inspects it
// (every field; the response only with -response; the text form; the
// same JSON as the operators' HTTP handler), forgets it, finds it gone,
// and sees the next call with the key run its work again.
func TestInspectForget(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		g := e.guard(t)
		const key, scope = "orders/42", "tenant:1"
		var runs atomic.Int32
		opts := []middleware.CallOption{middleware.Scope(scope), middleware.Credentials("Bearer t"), middleware.RecordTTL(time.Hour)}
		out, err := g.Execute(t.Context(), key, order, counted(&runs, middleware.Result{Value: []byte("hello")}), opts...)
		if err != nil || !out.Recorded {
			t.Fatalf("Execute: %+v, %v", out, err)
		}
		who := []string{"-key", key, "-scope", scope}

		m := jsonObject(t, e.args("inspect", who...)...)
		want := map[string]any{
			"record_key": e.ns + ":tenant%3A1:orders/42", "state": "completed", "algorithm": "json-v2",
			"bound": true, "fence": float64(out.Fence), "size": float64(5), "sealed": false,
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%s = %#v; want %#v", k, m[k], v)
			}
		}
		created, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["created"]))
		expires, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["expires"]))
		if err := errors.Join(err1, err2); err != nil || expires.Sub(created) != time.Hour {
			t.Errorf("created %v, expires %v (%v); want the record TTL apart", m["created"], m["expires"], err)
		}
		if _, ok := m["response"]; ok {
			t.Errorf("the response is shown without -response: %v", m)
		}
		full := jsonObject(t, e.args("inspect", append(who, "-response")...)...)
		if full["response"] != "aGVsbG8=" { // base64 of "hello"
			t.Errorf("response %v; want hello in base64", full["response"])
		}

		text := tool(t, e.args("inspect", who...)...)
		for _, line := range []string{"record key  " + e.ns + ":tenant%3A1:orders/42\n", "state       completed\n", "size        5 bytes\n", "bound       yes"} {
			if text.code != exitOK || !strings.Contains(text.stdout, line) || strings.Contains(text.stdout, "response") {
				t.Fatalf("inspect: exit %d, stdout:\n%s\nwant the line %q and no response", text.code, text.stdout, line)
			}
		}

		// The operators' HTTP handler shows the very same record.
		h, err := nethttp.NewAdmin(g)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		status, body := get(t, srv.URL+"?"+url.Values{"key": {key}, "scope": {scope}, "response": {"1"}}.Encode())
		var fromHTTP map[string]any
		if err := json.Unmarshal(body, &fromHTTP); status != http.StatusOK || err != nil || !reflect.DeepEqual(fromHTTP, without(full, "value")) {
			t.Fatalf("the handler's record (%d, %v):\n%s\nthe tool's, but for the decoded value:\n%v", status, err, body, full)
		}
		// The tool decodes the value Execute recorded: text, as it is.
		if v := full["value"]; !reflect.DeepEqual(v, map[string]any{"size": float64(5), "text": "hello"}) {
			t.Errorf("the decoded value %v; want hello as text", v)
		}
		if r := tool(t, e.args("inspect", append(who, "-response")...)...); r.code != exitOK || !strings.Contains(r.stdout, "\nresponse    hello\n") {
			t.Errorf("inspect -response: exit %d, stdout:\n%s\nwant the line response hello", r.code, r.stdout)
		}

		// Forgetting a completed record says that the work runs again.
		r := tool(t, e.args("forget", who...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, "forgot key orders/42, which had completed") ||
			!strings.Contains(r.stdout, "the next request with the key runs the work again (a second time)") {
			t.Fatalf("forget of a completed record: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if r := tool(t, e.args("inspect", who...)...); r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "no record for key orders/42 in scope tenant:1") {
			t.Fatalf("inspect after forget: exit %d, stdout %q, stderr %q; want 1 and no record", r.code, r.stdout, r.stderr)
		}
		if status, _ := get(t, srv.URL+"?"+url.Values{"key": {key}, "scope": {scope}}.Encode()); status != http.StatusNotFound {
			t.Fatalf("the handler after forget: %d; want 404", status)
		}
		if d := jsonObject(t, e.args("forget", who...)...); d["deleted"] != false {
			t.Fatalf("second forget: %v; want not deleted", d)
		}
		if r := tool(t, e.args("forget", who...)...); r.code != exitOK || !strings.Contains(r.stdout, "had no record") {
			t.Fatalf("forget of a key without a record: exit %d, stdout %q", r.code, r.stdout)
		}
		out, err = g.Execute(t.Context(), key, order, counted(&runs, middleware.Result{Value: []byte("again")}), opts...)
		if err != nil || out.Replayed || runs.Load() != 2 {
			t.Fatalf("Execute after forget: %+v, %v, %d runs; want a second run", out, err, runs.Load())
		}
	})
}

// TestForgetNotReplayable: a key recorded as not replayable refuses its
// retries without running them, until the tool forgets it; then the next
// call runs its work.
func TestForgetNotReplayable(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		g := e.guard(t)
		var runs atomic.Int32
		work := counted(&runs, middleware.Result{NotReplayable: true})
		if _, err := g.Execute(t.Context(), "k", order, work); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Execute(t.Context(), "k", order, work); !errors.Is(err, middleware.ErrNotReplayable) || runs.Load() != 1 {
			t.Fatalf("retry: %v, %d runs; want ErrNotReplayable and no second run", err, runs.Load())
		}
		if m := jsonObject(t, e.args("inspect", "-key", "k")...); m["state"] != "not-replayable" || m["bound"] != false {
			t.Fatalf("inspect: %v; want not-replayable", m)
		}
		if r := tool(t, e.args("forget", "-key", "k")...); r.code != exitOK || !strings.Contains(r.stdout, "forgot key k") {
			t.Fatalf("forget: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		out, err := g.Execute(t.Context(), "k", order, counted(&runs, middleware.Result{Value: []byte("ok")}))
		if err != nil || out.Replayed || runs.Load() != 2 {
			t.Fatalf("Execute after forget: %+v, %v, %d runs; want a second run", out, err, runs.Load())
		}
	})
}

// TestForgetLiveClaim: while a request's work runs, holding its key,
// forget refuses to delete the claim (exit 1, nothing on stdout, the
// lease's end on stderr, -json or not), the claim stays and a retry through
// another guard is told "in progress"; forget -force deletes it, the
// running work's outcome is then not recorded, and the next call runs the
// work again.
func TestForgetLiveClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		// A lease of an hour is renewed every 20 minutes: its end stays put
		// while the test compares it.
		node1, err := middleware.New(e.store, middleware.WithNamespace(e.ns), middleware.WithLeaseTTL(time.Hour),
			middleware.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		node2, err := middleware.New(e.store, middleware.WithNamespace(e.ns), middleware.WithWaitBudget(0))
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		started, blocked := make(chan struct{}), make(chan struct{})
		release := sync.OnceFunc(func() { close(blocked) })
		t.Cleanup(release) // should the test fail while the work waits
		type result struct {
			out middleware.Outcome
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := node1.Execute(t.Context(), "pay", order, func(context.Context) (middleware.Result, error) {
				runs.Add(1)
				close(started)
				<-blocked
				return middleware.Result{Value: []byte("paid")}, nil
			}, middleware.Scope("tenant"))
			done <- result{out, err}
		}()
		<-started
		who := []string{"-key", "pay", "-scope", "tenant"}
		claim := jsonObject(t, e.args("inspect", who...)...)
		expires, _ := claim["expires"].(string)
		if claim["state"] != "claimed" || expires == "" {
			t.Fatalf("the running claim: %v", claim)
		}

		for _, args := range [][]string{e.args("forget", who...), e.args("forget", append(who, "-json")...)} {
			r := tool(t, args...)
			if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "idemkit forget: key pay is claimed") ||
				!strings.Contains(r.stderr, expires) || !strings.Contains(r.stderr, "-force") {
				t.Fatalf("%v: exit %d, stdout %q, stderr %q; want 1 and the lease's end %s", args, r.code, r.stdout, r.stderr, expires)
			}
		}
		if m := jsonObject(t, e.args("inspect", who...)...); m["state"] != "claimed" || m["fence"] != claim["fence"] {
			t.Fatalf("the claim after the refusals: %v; want it still there", m)
		}
		if _, err := node2.Execute(t.Context(), "pay", order, counted(&runs, middleware.Result{Value: []byte("twice")}), middleware.Scope("tenant")); !errors.Is(err, middleware.ErrInProgress) || runs.Load() != 1 {
			t.Fatalf("a retry on another node: %v, %d runs; want in progress and one run", err, runs.Load())
		}

		if d := jsonObject(t, e.args("forget", append(who, "-force")...)...); d["deleted"] != true || d["state"] != "claimed" {
			t.Fatalf("forget -force: %v; want deleted", d)
		}
		release()
		if r := <-done; r.err != nil || r.out.Recorded {
			t.Fatalf("the forgotten claim's call: %+v, %v; want its outcome not recorded", r.out, r.err)
		}
		out, err := node2.Execute(t.Context(), "pay", order, counted(&runs, middleware.Result{Value: []byte("again")}), middleware.Scope("tenant"))
		if err != nil || out.Replayed || runs.Load() != 2 {
			t.Fatalf("after forget -force: %+v, %v, %d runs; want a second run", out, err, runs.Load())
		}
	})
}

// TestSweep: on PostgreSQL and Firestore, sweep deletes the expired record
// and only it; on Redis it says there is nothing to sweep.
func TestSweep(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		if e.held == nil {
			r := tool(t, e.args("sweep")...)
			if r.code != exitOK || !strings.Contains(r.stdout, "nothing to sweep") {
				t.Fatalf("sweep on Redis: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if m := jsonObject(t, e.args("sweep")...); m["deleted"] != float64(0) {
				t.Fatalf("sweep -json on Redis: %v", m)
			}
			return
		}
		g := e.guard(t)
		var runs atomic.Int32
		for key, ttl := range map[string]time.Duration{"old": time.Millisecond, "live": time.Hour} {
			if _, err := g.Execute(t.Context(), key, order, counted(&runs, middleware.Result{Value: []byte(key)}), middleware.RecordTTL(ttl)); err != nil {
				t.Fatal(err)
			}
		}
		old, live := e.ns+"::old", e.ns+"::live"
		if !e.held(t, old) || !e.held(t, live) {
			t.Fatal("the records are not in the backend")
		}
		// The expired record may go once the backend's clock has passed its
		// expiry and its fence plus the largest clock step (one minute by
		// default; on Firestore, its padded expireAt): sweep until it has
		// gone, for up to twice that.
		deleted := 0
		for deadline := time.Now().Add(2 * time.Minute); e.held(t, old); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the expired record is still there after two minutes of sweeps (%d deleted)", deleted)
			}
			m := jsonObject(t, e.args("sweep")...)
			n, ok := m["deleted"].(float64)
			if !ok {
				t.Fatalf("sweep: %v", m)
			}
			deleted += int(n)
		}
		if deleted != 1 || !e.held(t, live) {
			t.Fatalf("%d records swept, live record held: %v; want the expired one alone", deleted, e.held(t, live))
		}
		if r := tool(t, e.args("sweep")...); r.code != exitOK || r.stdout != "deleted 0 expired records\n" {
			t.Fatalf("second sweep: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if r := tool(t, e.args("inspect", "-key", "live")...); r.code != exitOK {
			t.Fatalf("inspect of the live record: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestBackendDown: with its Redis stopped, the handler answers 503
// idempotency-unavailable to GET and DELETE, and the tool exits 1 saying
// why.
func TestBackendDown(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Execute(t.Context(), "k", order, counted(new(atomic.Int32), middleware.Result{Value: []byte("v")})); err != nil {
		t.Fatal(err)
	}
	h, err := nethttp.NewAdmin(g)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(h)
	defer admin.Close()
	if status, _ := get(t, admin.URL+"?key=k"); status != http.StatusOK {
		t.Fatalf("GET with Redis up: %d", status)
	}
	srv.Stop(t)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequestWithContext(t.Context(), method, admin.URL+"?key=k", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(body), `"type":"urn:idemkit:problem:`+"idempotency-unavailable"+`"`) {
			t.Fatalf("%s with Redis down: %d %s; want 503 %s", method, resp.StatusCode, body, "idempotency-unavailable")
		}
	}
	for _, cmd := range []string{"inspect", "forget"} {
		r := tool(t, cmd, "-url", "redis://"+srv.Addr+"/0", "-key", "k", "-timeout", "10s")
		if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "ServiceUnavailable") {
			t.Fatalf("%s with Redis down: exit %d, stdout %q, stderr %q; want 1 and why", cmd, r.code, r.stdout, r.stderr)
		}
	}
}

// without returns a copy of m without the member name.
func without(m map[string]any, name string) map[string]any {
	c := maps.Clone(m)
	delete(c, name)
	return c
}

// get GETs url and returns the status and body.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestAdminHandler runs the operators' HTTP handler on every backend,
// through a real client: a key recorded as not replayable by the HTTP
// middleware refuses its retries (409) until the handler forgets it; then
// the next request runs the handler. A response sealed by the guard's
// store shows as sealed, with the size of its envelope, and opens with
// response=1.
func TestAdminHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, e env) {
		seal := store.SealKey{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
		sealing, err := store.Seal(e.store, seal)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(sealing, middleware.WithNamespace(e.ns))
		if err != nil {
			t.Fatal(err)
		}
		mw, err := nethttp.New(g)
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		app := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if r.Header.Get("X-Stream") == "1" {
				nethttp.MarkNotReplayable(w)
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "order %d", n)
		})))
		defer app.Close()
		h, err := nethttp.NewAdmin(g)
		if err != nil {
			t.Fatal(err)
		}
		admin := httptest.NewServer(h)
		defer admin.Close()
		post := func(key string, stream bool) int {
			t.Helper()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, app.URL+"/orders", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", `"`+key+`"`)
			if stream {
				req.Header.Set("X-Stream", "1")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		call := func(method, key string, q ...string) map[string]any {
			t.Helper()
			v := url.Values{"key": {key}}
			for i := 0; i < len(q); i += 2 {
				v.Set(q[i], q[i+1])
			}
			req, _ := http.NewRequestWithContext(t.Context(), method, admin.URL+"/?"+v.Encode(), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&m); resp.StatusCode != http.StatusOK || err != nil {
				t.Fatalf("%s %s: %d %v %v", method, key, resp.StatusCode, m, err)
			}
			return m
		}

		if s1, s2 := post("stream/1", true), post("stream/1", true); s1 != http.StatusCreated || s2 != http.StatusConflict || runs.Load() != 1 {
			t.Fatalf("a not-replayable key: %d then %d, %d runs; want 201 then 409, one run", s1, s2, runs.Load())
		}
		if m := call(http.MethodGet, "stream/1"); m["state"] != "not-replayable" || m["record_key"] != e.ns+"::stream/1" {
			t.Fatalf("GET: %v", m)
		}
		if m := call(http.MethodDelete, "stream/1"); m["deleted"] != true {
			t.Fatalf("DELETE: %v", m)
		}
		if s := post("stream/1", false); s != http.StatusCreated || runs.Load() != 2 {
			t.Fatalf("after DELETE: %d, %d runs; want the handler to run again", s, runs.Load())
		}

		post("sealed", false)
		m := call(http.MethodGet, "sealed", "response", "1")
		plain, err := base64.StdEncoding.DecodeString(fmt.Sprint(m["response"]))
		if err != nil || !bytes.HasSuffix(plain, []byte("order 3")) {
			t.Fatalf("opened response %q (%v); want the recorded answer", plain, err)
		}
		if want := float64(len(plain) + 51 + len(seal.ID)); m["sealed"] != true || m["size"] != want {
			t.Fatalf("sealed record %v; want sealed, size %v (the envelope)", m, want)
		}
		// The tool holds no seal keys: it shows the record, not the response.
		cli := jsonObject(t, e.args("inspect", "-key", "sealed", "-response")...)
		if _, shown := cli["response"]; shown || cli["sealed"] != true || cli["size"] != m["size"] || cli["response_error"] == nil {
			t.Fatalf("the tool on a sealed record: %v", cli)
		}
		if r := tool(t, e.args("inspect", "-key", "sealed", "-raw")...); r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "sealed") {
			t.Fatalf("-raw on a sealed record: exit %d, stdout %q, stderr %q; want 1 and why", r.code, r.stdout, r.stderr)
		}
	})
}
