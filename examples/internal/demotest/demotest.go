package demotest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
)

// RunFunc is a demo program's run function (demo.Program.Run): it serves
// until ctx ends, after it has sent the address it listens on to ready,
// and returns nil once it has shut down gracefully.
type RunFunc func(ctx context.Context, args []string, logger *slog.Logger, ready chan<- string) error

// backend is one of the demos' -store choices, with the flags that point
// it at a server of testenv.
type backend struct {
	name string
	args func(t *testing.T) []string
	// shared: instances with their own clients share the server (every
	// backend but memory, which lives in the program's process).
	shared bool
}

// backends are every backend the demos serve on.
func backends() []backend {
	return []backend{
		{"memory", func(*testing.T) []string { return nil }, false},
		{"redis", func(t *testing.T) []string {
			return []string{"-store", "redis", "-redis-addr", testenv.NewRedis(t).Addr}
		}, true},
		{"redis-cluster", func(t *testing.T) []string {
			return []string{"-store", "redis-cluster", "-redis-addrs", strings.Join(testenv.RedisCluster(t).Addrs, ",")}
		}, true},
		{"postgres", func(t *testing.T) []string {
			return []string{"-store", "postgres", "-postgres-url", testenv.NewPostgres(t).URL}
		}, true},
		{"mysql", func(t *testing.T) []string {
			return []string{"-store", "mysql", "-mysql-dsn", testenv.NewMySQL(t).DSN}
		}, true},
		{"firestore", func(t *testing.T) []string {
			testenv.Firestore(t) // sets FIRESTORE_EMULATOR_HOST, which the program's client follows
			return []string{"-store", "firestore", "-firestore-project", testenv.FirestoreProject(t)}
		}, true},
		{"dynamodb", func(t *testing.T) []string {
			dynamoCredentials.Do(func() {
				// The program's AWS configuration comes from the
				// environment; dynalite checks that requests are signed,
				// not by whom.
				for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"} {
					if os.Getenv(k) == "" {
						_ = os.Setenv(k, v)
					}
				}
			})
			return []string{"-store", "dynamodb", "-dynamodb-endpoint", testenv.Dynamo(t).URL}
		}, true},
	}
}

var dynamoCredentials sync.Once

// Run runs one subtest per backend (memory, redis, redis-cluster,
// postgres, mysql, firestore on the emulator, dynamodb on dynalite): it starts run with that backend's flags and -addr
// 127.0.0.1:0, calls check with the address the program listens on, then
// cancels the program's ctx and fails the test unless run returns nil
// within 15 seconds.
func Run(t *testing.T, run RunFunc, check func(t *testing.T, addr string)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { serve(t, run, b.args(t), check) })
	}
}

func serve(t *testing.T, run RunFunc, args []string, check func(t *testing.T, addr string)) {
	addr, stop := start(t, run, args)
	check(t, addr)
	stop()
}

// start starts run with args and -addr 127.0.0.1:0 and returns once it
// listens, with its address and a function that cancels its ctx and fails
// the test unless run returns nil within 15 seconds. If run fails before
// it listens, start fails the test.
func start(t *testing.T, run RunFunc, args []string) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, slog.New(slog.DiscardHandler), ready) }()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	return addr, func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("graceful shutdown of %s: %v", addr, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the server at %s did not shut down", addr)
		}
	}
}

// HTTPContract drives the HTTP demo service at addr with a real client and
// checks its contract: POST /orders executes once per key and replays the
// retry (status, Location and body), answers 422 to the key with another
// body and 400 without a key; POST /notes runs without a key; status=503
// is delivered; Bob's request with Alice's key and body runs as his own,
// never answered with Alice's response, while Alice's retry under her
// refreshed token replays hers; unknown credentials are 401; GET /orders
// is 405; GET /stats counts the five executions.
func HTTPContract(t *testing.T, addr string) {
	prefix := testenv.Name(t) // keys of their own, even on a shared server
	postAs := func(token, path, key, body string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", prefix+"-"+key)
		}
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	postBody := func(path, key, body string) (int, http.Header, string) { return postAs("", path, key, body) }
	post := func(path, key string) (int, http.Header, string) { return postBody(path, key, `{"x":1}`) }
	if code, h, _ := post("/orders", "a"); code != 201 || h.Get("Location") != "/orders/1" {
		t.Fatalf("POST /orders: %d %v", code, h)
	}
	if code, h, b := post("/orders", "a"); code != 201 || h.Get("Idempotent-Replayed") != "true" || h.Get("Location") != "/orders/1" || !strings.Contains(b, `"order":1`) {
		t.Fatalf("retry: %d %v %s; want a replay of order 1", code, h, b)
	}
	if code, h, _ := postBody("/orders", "a", `{"x":2}`); code != 422 || h.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("the same key with another body: %d %v; want a 422 problem", code, h)
	}
	if code, _, _ := post("/orders", ""); code != 400 {
		t.Fatalf("POST /orders without a key: %d", code)
	}
	if code, _, _ := post("/notes", ""); code != 201 {
		t.Fatalf("POST /notes without a key: %d", code)
	}
	if code, _, _ := post("/orders?status=503", "b"); code != 503 {
		t.Fatalf("status=503: %d", code)
	}
	// Alice and Bob: one key, one body, two callers.
	const payment = `{"amount":100}`
	alice, ah, ab := postAs("Bearer alice-1", "/orders", "pay", payment)
	if alice != 201 || ah.Get("Idempotent-Replayed") != "" || !strings.Contains(ab, `"order":4`) {
		t.Fatalf("Alice: %d %v %s", alice, ah, ab)
	}
	if code, h, b := postAs("Bearer bob-1", "/orders", "pay", payment); code != 201 || h.Get("Idempotent-Replayed") != "" || b == ab {
		t.Fatalf("Bob with Alice's key: %d %v %s; want his own execution", code, h, b)
	}
	if code, h, b := postAs("Bearer alice-2", "/orders", "pay", payment); code != 201 || h.Get("Idempotent-Replayed") != "true" || b != ab {
		t.Fatalf("Alice's retry with her refreshed token: %d %v %s; want her response replayed", code, h, b)
	}
	if code, _, _ := postAs("Bearer mallory", "/orders", "pay", payment); code != http.StatusUnauthorized {
		t.Fatalf("unknown credentials: %d; want 401", code)
	}
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(b)) != `{"executions":5}` {
		t.Fatalf("GET /stats: %s", b)
	}
	if resp, err := http.Get("http://" + addr + "/orders"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /orders: %v %v; want 405", resp, err)
	} else {
		resp.Body.Close()
	}
}

// BackendArgs returns the flags that point a demo program at a server of
// the shared backend name (redis, redis-cluster, postgres, mysql,
// firestore, dynamodb), started for t.
func BackendArgs(t *testing.T, name string) []string {
	t.Helper()
	for _, b := range backends() {
		if b.name == name && b.shared {
			return b.args(t)
		}
	}
	t.Fatalf("demotest: no shared backend %q", name)
	return nil
}
