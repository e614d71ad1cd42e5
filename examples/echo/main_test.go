package main

import (
	"testing"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDemoServer starts the demo (on echo) on a free port on every backend,
// exercises its contract with a real client and stops it gracefully.
func TestDemoServer(t *testing.T) { demotest.Run(t, program().Run, demotest.HTTPContract) }
