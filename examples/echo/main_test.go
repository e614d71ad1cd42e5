package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDemoServer starts the demo (on echo) on a free port on every
// backend, exercises its contract with a real client and stops it gracefully.
func TestDemoServer(t *testing.T) {
	for _, c := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return nil }},
		{"redis", func(t *testing.T) []string {
			return []string{"-store", "redis", "-redis-addr", testenv.NewRedis(t).Addr}
		}},
		{"redis-cluster", func(t *testing.T) []string {
			return []string{"-store", "redis-cluster", "-redis-addrs", strings.Join(testenv.RedisCluster(t).Addrs, ",")}
		}},
		{"postgres", func(t *testing.T) []string {
			return []string{"-store", "postgres", "-postgres-url", testenv.NewPostgres(t).URL}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { demoServer(t, c.args(t)) })
	}
}

func demoServer(t *testing.T, args []string) {
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, slog.New(slog.DiscardHandler), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	postBody := func(path, key, body string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
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
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(b)) != `{"executions":3}` {
		t.Fatalf("GET /stats: %s", b)
	}
	if resp, err := http.Get("http://" + addr + "/orders"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /orders: %v %v; want 405", resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("graceful shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the server did not shut down")
	}
}
