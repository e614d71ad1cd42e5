package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
)

// runMainEnv makes the test binary run the program's main instead of the
// tests: the tests start the program as processes of its own that way,
// built exactly as the test is.
const runMainEnv = "REDISAUTH_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	testenv.Main(m)
}

// instance is one running process of the program.
type instance struct {
	url string // http://host:port

	mu     sync.Mutex
	stderr bytes.Buffer
}

func (in *instance) log() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stderr.String()
}

// startProgram starts the program in a process of its own with args and
// TOKEN_SECRET=secret, waits until it logs the address it listens on, and
// stops it with SIGTERM when the test ends, which it must survive with
// exit status 0.
func startProgram(t *testing.T, secret []byte, args ...string) *instance {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "TOKEN_SECRET="+string(secret))
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in := &instance{}
	addr := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			in.mu.Lock()
			in.stderr.WriteString(line + "\n")
			in.mu.Unlock()
			if strings.Contains(line, "msg=listening") {
				if _, a, ok := strings.Cut(line, " addr="); ok {
					addr <- a
				}
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
	}()
	exited := make(chan error, 1)
	go func() {
		<-copied
		exited <- cmd.Wait()
	}()
	select {
	case a := <-addr:
		in.url = "http://" + a
	case err := <-exited:
		t.Fatalf("the program exited before it listened (%v):\n%s", err, in.log())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("the instance at %s stopped with %v on SIGTERM:\n%s", in.url, err, in.log())
		}
	})
	return in
}

// post sends POST /orders with the key, token and body, and returns the
// answer with its body read.
func post(t *testing.T, in *instance, key, token, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, in.url+"/orders", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestTwoInstancesOverRedis starts the program twice on one real Redis and
// retries a request on the other instance: the same key with the same
// caller's token (or that caller's refreshed token) is the stored answer,
// replayed, and the order ran once across both processes; another caller
// with the same key gets an order of its own, never the first caller's
// answer; a token the service did not sign is refused, and so is the key
// reused with another body.
func TestTwoInstancesOverRedis(t *testing.T) {
	srv := testenv.Redis(t)
	secret := []byte(rand.Text())
	a := startProgram(t, secret, "-addr", "127.0.0.1:0", "-redis", srv.Addr)
	b := startProgram(t, secret, "-addr", "127.0.0.1:0", "-redis", srv.Addr)

	// The orders' counter, read on the same Redis: it counts every
	// execution of the handler in both processes. Another test binary may
	// share the server (IDEMKIT_REDIS_ADDR), hence the differences.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	counter := func() int64 {
		t.Helper()
		n, err := client.Get(t.Context(), orderCounter).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n
	}
	start := counter()
	executions := func() int64 { return counter() - start }

	mustMint := func(principal string) string {
		t.Helper()
		token, err := mint(secret, principal)
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	alice, aliceRefreshed, bob := mustMint("alice"), mustMint("alice"), mustMint("bob")
	key := "order-" + rand.Text()
	const body = `{"sku":"A1","qty":2}`

	first, firstBody := post(t, a, key, alice, body)
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first request on A: %d, Idempotent-Replayed %q, %s; want 201, not a replay", first.StatusCode, first.Header.Get("Idempotent-Replayed"), firstBody)
	}
	if !strings.Contains(firstBody, `"principal":"alice"`) {
		t.Fatalf("first request on A answered %s; want Alice's order", firstBody)
	}

	for _, retry := range []struct{ name, token string }{
		{"the same token", alice},
		{"Alice's refreshed token", aliceRefreshed},
	} {
		resp, got := post(t, b, key, retry.token, body)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || got != firstBody {
			t.Fatalf("retry on B with %s: %d, Idempotent-Replayed %q, %s; want A's 201 %s replayed", retry.name, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), got, firstBody)
		}
	}
	if n := executions(); n != 1 {
		t.Fatalf("after a request and two retries on the other instance, the order ran %d times; want 1", n)
	}

	// Bob's key lives in Bob's scope: his request runs for him.
	resp, got := post(t, b, key, bob, body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" || got == firstBody || !strings.Contains(got, `"principal":"bob"`) {
		t.Fatalf("Bob with Alice's key on B: %d, Idempotent-Replayed %q, %s; want a 201 of his own, not Alice's replay", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), got)
	}
	if n := executions(); n != 2 {
		t.Fatalf("after Bob's order, %d executions; want 2", n)
	}

	// A token signed with another secret names Alice but proves nothing.
	forgedSecret := []byte(rand.Text())
	forged, err := mint(forgedSecret, "alice")
	if err != nil {
		t.Fatal(err)
	}
	resp, got = post(t, a, key, forged, body)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Idempotent-Replayed") != "" || strings.Contains(got, "order") {
		t.Fatalf("a forged token with Alice's key: %d, Idempotent-Replayed %q, %s; want 401, nothing replayed", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), got)
	}

	// Alice's key reused with another request is refused on either instance.
	resp, got = post(t, a, key, alice, `{"sku":"B2","qty":1}`)
	if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("Alice's key with another body: %d, Idempotent-Replayed %q, %s; want 422", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), got)
	}
	if n := executions(); n != 2 {
		t.Fatalf("after the refusals, %d executions; want 2", n)
	}
}

// TestRefusesToStartWithoutRedis: the program runs the guard's startup
// check and exits non-zero with its error, rather than listen and answer
// every request 503.
func TestRefusesToStartWithoutRedis(t *testing.T) {
	srv := testenv.NewRedis(t)
	srv.Stop(t)
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0", "-redis", srv.Addr)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "TOKEN_SECRET="+rand.Text())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || strings.Contains(string(out), "msg=listening") || !strings.Contains(string(out), "Redis") {
		t.Fatalf("the program on a stopped Redis: %v\n%s\nwant exit status 1 with the startup check's error, never listening", err, out)
	}
	t.Logf("refused to start: %s", out)
}
