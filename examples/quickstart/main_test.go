package main

import (
	"strings"
	"testing"
)

// TestQuickstart runs the quickstart and checks its summary: the storm and
// its retry executed once, everything else answered as the contract says.
func TestQuickstart(t *testing.T) {
	var out strings.Builder
	sum, err := run(t.Context(), &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := summary{executions: 2, replayed: 51, mismatches: 1, rejected: 1, stormExecutions: 1}
	if sum != want {
		t.Fatalf("summary %+v; want %+v\n%s", sum, want, out.String())
	}
	if !strings.Contains(out.String(), "executions=2 replayed=51 conflicts=0 mismatches=1 rejected=1") {
		t.Fatalf("the summary line is missing:\n%s", out.String())
	}
}
