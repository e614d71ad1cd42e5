package main

import (
	"strings"
	"testing"
)

// TestDemo runs the demo and checks the story it tells.
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"worker A holds the lock   fence 000000000000001",
		"worker B holds the lock   fence 000000000000002",
		"holder gets fence 000000000000005",
		"holder 2 writes:  accepted",
		"holder 1 resumes and writes with its old fence: refused: stale fence",
		"released=false (not-found)",
		`the resource holds "balance=90"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "GRANTED") {
		t.Errorf("an intruder took the renewed lock:\n%s", text)
	}
	if strings.Count(text, "an intruder's acquire: refused") != 5 {
		t.Errorf("want 5 refused intruders:\n%s", text)
	}
}
