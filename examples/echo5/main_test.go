package main

import (
	"testing"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDemoServer starts the demo (on echo v5) on a free port on every backend,
// exercises its contract with a real client and stops it gracefully.
func TestDemoServer(t *testing.T) { demotest.Run(t, program().Run, demotest.HTTPContract) }

// TestDemoCluster starts 4 instances of the demo (on echo v5) on one shared server
// of every real backend and proves exactly-once across them: concurrent
// duplicates spread over the instances execute once in all.
func TestDemoCluster(t *testing.T) {
	demotest.RunCluster(t, program().Run, demotest.ClusterInstances, demotest.HTTPCluster)
}

// TestDemoMetrics starts the demo (on echo v5) with -metrics on the memory
// backend, makes a first execution and its replay, and checks what GET
// /metrics counts. The adapter names the operation as it does (the route
// is not asserted).
func TestDemoMetrics(t *testing.T) {
	demotest.RunMemory(t, program().Run, []string{"-metrics"}, func(t *testing.T, addr string) {
		demotest.HTTPMetrics(t, addr, "")
	})
}
