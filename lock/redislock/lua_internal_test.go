package redislock

import (
	"strings"
	"testing"
)

// TestLibrarySubset: a script carries the library functions it calls,
// directly or through others, and none it does not.
func TestLibrarySubset(t *testing.T) {
	got := librarySubset(`return {lock_release_call()}`)
	for _, want := range []string{"local function lock_release_call(", "local function lock_release(", "local function now_ms(", "local function lock_expires("} {
		if !strings.Contains(got, want) {
			t.Fatalf("the subset lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"lock_acquire(", "lock_extend(", "lock_is_locked("} {
		if strings.Contains(got, "local function "+unwanted) {
			t.Fatalf("the subset has %q, which the script never calls", unwanted)
		}
	}
	if strings.Index(got, "function now_ms(") > strings.Index(got, "function lock_release(") {
		t.Fatal("functions are not in library order (a local must be defined before it is used)")
	}
	if len(libraryFunctions) < 8 || libraryFunctions[0].name != "now_ms" {
		t.Fatalf("the library split into %d functions, first %q", len(libraryFunctions), libraryFunctions[0].name)
	}
	if librarySubset(`return 1`) != "\n" {
		t.Fatal("a script that calls nothing got library code")
	}
}
