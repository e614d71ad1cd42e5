package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDemoServer starts the demo on a free port, exercises its contract
// with a real client and stops it gracefully.
func TestDemoServer(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, slog.New(slog.DiscardHandler), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	post := func(path, key string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(`{"x":1}`))
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
	if code, h, _ := post("/orders", "a"); code != 201 || h.Get("Location") != "/orders/1" {
		t.Fatalf("POST /orders: %d %v", code, h)
	}
	if _, h, _ := post("/orders", "a"); h.Get("Idempotent-Replayed") != "true" {
		t.Fatal("no replay")
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
