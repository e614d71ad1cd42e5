package main

import (
	"regexp"
	"strconv"
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
		"worker B woke on the release",
		"holder 2 writes:  accepted",
		"holder 1 resumes and writes with its old fence: refused: stale fence",
		"released=false (expired: true)",
		`the resource holds "balance=90"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo output lacks %q:\n%s", want, text)
		}
	}
	// Fences are 15-digit decimals that grow with every holder of a key.
	a, b := fences(t, text, `worker A holds the lock   fence (\d{15})`), fences(t, text, `worker B holds the lock   fence (\d{15})`)
	held := fences(t, text, `holder gets fence (\d{15})`)
	if len(a) != 1 || len(b) != 1 || len(held) != 3 {
		t.Fatalf("fences: A %v, B %v, holders %v; want one, one and three:\n%s", a, b, held, text)
	}
	all := append(append(a, b...), held...)
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Errorf("the fences of \"report:daily\" do not grow: %v", all)
		}
	}
	stale, fresh := fences(t, text, `holder 1 takes the lock, fence (\d{15})`), fences(t, text, `holder 2 takes over with fence (\d{15})`)
	if len(stale) != 1 || len(fresh) != 1 || fresh[0] <= stale[0] {
		t.Errorf("the takeover's fence %v is not above the stale holder's %v", fresh, stale)
	}
	if strings.Contains(text, "GRANTED") {
		t.Errorf("an intruder took the renewed lock:\n%s", text)
	}
	if strings.Count(text, "an intruder's acquire: refused") != 5 {
		t.Errorf("want 5 refused intruders:\n%s", text)
	}
}

// fences returns the numbers the pattern's group matched in text, in order.
func fences(t *testing.T, text, pattern string) []uint64 {
	t.Helper()
	var out []uint64
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(text, -1) {
		n, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}
