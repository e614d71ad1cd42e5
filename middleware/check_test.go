package middleware_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestCheck: the startup check passes on a memory store, sealed,
// composed with a lock provider or neither, and reports a closed one
// unavailable.
func TestCheck(t *testing.T) {
	ctx := t.Context()
	mem := memstore.New()
	if err := newGuard(t, mem).Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	current, _ := guardtest.SealKeys()
	sealed, err := store.Seal(mem, current)
	if err != nil {
		t.Fatal(err)
	}
	if err := newGuard(t, sealed).Check(ctx); err != nil {
		t.Fatalf("Check through a sealing store: %v", err)
	}
	composed, err := middleware.Compose(memstore.New(), newLocker(t, memstore.New()))
	if err != nil {
		t.Fatal(err)
	}
	if err := newGuard(t, composed).Check(ctx); err != nil {
		t.Fatalf("Check through a composed store: %v", err)
	}
	closed := memstore.New()
	_ = closed.Close()
	err = newGuard(t, closed).Check(ctx)
	if !errors.Is(err, middleware.ErrUnavailable) || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable || !errors.Is(err, memstore.ErrClosed) {
		t.Fatalf("Check on a closed store: %v; want ErrUnavailable with the store's ServiceUnavailable", err)
	}
}

// TestBackendFailureLoggedOnce: a guard whose store fails under it logs
// the failure through its logger once, however many calls fail, and
// every call still gets ErrUnavailable.
func TestBackendFailureLoggedOnce(t *testing.T) {
	mem := memstore.New()
	var log guardtest.Log
	g := newGuard(t, mem, middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour))
	fp := fingerprint.New("test", [32]byte{1})
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "before", fp, value(&runs, "ok")); err != nil {
		t.Fatal(err)
	}
	_ = mem.Close()
	for i := range 50 {
		if _, err := g.Execute(t.Context(), fmt.Sprint("key-", i), fp, value(&runs, "ok")); !errors.Is(err, middleware.ErrUnavailable) {
			t.Fatalf("call %d on a closed store: %v", i, err)
		}
	}
	lines := log.Lines(t, guardtest.BackendFailureMessage)
	if len(lines) != 1 || lines[0]["code"] != "ServiceUnavailable" || lines[0]["op"] != "claim" ||
		!strings.Contains(lines[0]["error"].(string), "store closed") {
		t.Fatalf("50 failing calls logged %d lines; want 1 naming the cause: %v", len(lines), lines)
	}
}

// TestFailureLogIntervalMustNotBeNegative: New refuses a negative
// interval.
func TestFailureLogIntervalMustNotBeNegative(t *testing.T) {
	_, err := middleware.New(memstore.New(), middleware.WithFailureLogInterval(-time.Second))
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New with a negative interval: %v; want InvalidArgument", err)
	}
}
