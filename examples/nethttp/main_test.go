package main

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
)

func TestMain(m *testing.M) {
	demotest.Child(map[string]demotest.RunFunc{"nethttp": program().Run, "steps": stepsProgram().Run})
	testenv.Main(m)
}

// TestDemoServer starts the demo on a free port on every backend,
// exercises its contract with a real client and stops it gracefully.
func TestDemoServer(t *testing.T) { demotest.Run(t, program().Run, demotest.HTTPContract) }

// TestDemoCluster starts 4 instances of the demo on one shared server
// of every real backend and proves exactly-once across them: concurrent
// duplicates spread over the instances execute once in all.
func TestDemoCluster(t *testing.T) {
	demotest.RunCluster(t, program().Run, demotest.ClusterInstances, demotest.HTTPCluster)
}

// TestDemoMetrics starts the demo with -metrics on the memory backend,
// makes a first execution and its replay, and checks what GET /metrics
// counts. Without -metrics, there is no /metrics.
func TestDemoMetrics(t *testing.T) {
	demotest.RunMemory(t, program().Run, []string{"-metrics"}, func(t *testing.T, addr string) {
		demotest.HTTPMetrics(t, addr, "POST /orders")
	})
	demotest.RunMemory(t, program().Run, nil, func(t *testing.T, addr string) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET /metrics without -metrics: %d, want 404", resp.StatusCode)
		}
	})
}

// TestDemoRefusesABackendThatCannotServe: the demo runs the guard's
// startup check and exits with its error, which says what is wrong,
// rather than serve every request an error: here Redis is not there.
func TestDemoRefusesABackendThatCannotServe(t *testing.T) {
	srv := testenv.NewRedis(t)
	srv.Stop(t)
	ready := make(chan string, 1)
	err := program().Run(t.Context(), []string{"-addr", "127.0.0.1:0", "-store", "redis", "-redis-addr", srv.Addr}, slog.New(slog.DiscardHandler), ready)
	if !errors.Is(err, middleware.ErrUnavailable) || !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("the demo on a killed Redis: %v; want the startup check's error", err)
	}
	if len(ready) != 0 {
		t.Fatal("the demo listened")
	}
	t.Logf("the demo refused to start: %v", err)
}
