package idemkitotel_test

import (
	"context"
	"errors"
	"testing"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// doGuard returns a guard on a memory store, with tm's hook on it and on
// its store.
func doGuard(t *testing.T, tm *telemetry) *middleware.Guard {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	g, err := middleware.New(tm.hook.Store(s), middleware.WithHook(tm.hook), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestWorkError: work that fails is an execution whose span has the
// status Error, and it counts as not recorded.
func TestWorkError(t *testing.T) {
	tm := newTelemetry(t)
	g := doGuard(t, tm)
	ctx, job := tm.tracer().Start(t.Context(), "job")
	failed := errors.New("the card was declined")
	_, _, err := middleware.Do(ctx, g, "k1", map[string]int{"amount": 100}, func(context.Context) (string, error) {
		return "", failed
	}, middleware.Operation("charge"))
	job.End()
	if !errors.Is(err, failed) {
		t.Fatalf("Do: %v", err)
	}
	s := tm.callSpan(t, job.SpanContext(), "charge")
	checkOutcome(t, s, "executed", 1, otelcodes.Error)
	a := attrs(s)
	if a["idemkit.recorded"].AsBool() || a["error.type"].AsString() != "_OTHER" || s.Status().Description != failed.Error() {
		t.Errorf("span %v, status %+v", s.Attributes(), s.Status())
	}
	m := tm.metrics(t)
	if m.count("idemkit.calls.not_recorded", op("charge"), outcome("executed")) != 1 {
		t.Errorf("not recorded: %+v", m.points("idemkit.calls.not_recorded"))
	}
	if m.count("idemkit.backend.operations", backendOp("release"), result("ok")) != 1 {
		t.Errorf("backend operations: %+v; want the claim released", m.points("idemkit.backend.operations"))
	}
}

// TestNestedCalls: a guarded call made by the work of another is a child
// of its span, and one rejected there (it never starts) leaves the
// enclosing call's span alone.
func TestNestedCalls(t *testing.T) {
	tm := newTelemetry(t)
	g := doGuard(t, tm)
	ctx, job := tm.tracer().Start(t.Context(), "job")
	_, _, err := middleware.Do(ctx, g, "order-1", "order", func(ctx context.Context) (string, error) {
		if _, _, err := middleware.Do(ctx, g, "", "invalid", func(context.Context) (int, error) { return 0, nil },
			middleware.Operation("reserve")); !errors.Is(err, middleware.ErrInvalidKey) {
			t.Errorf("a call without a key: %v", err)
		}
		if !trace.SpanFromContext(ctx).IsRecording() {
			t.Error("the rejected inner call ended the outer call's span")
		}
		_, _, err := middleware.Do(ctx, g, "payment-1", "payment", func(context.Context) (int, error) { return 1, nil },
			middleware.Operation("pay"))
		return "done", err
	}, middleware.Operation("order"))
	job.End()
	if err != nil {
		t.Fatal(err)
	}
	outer := tm.callSpan(t, job.SpanContext(), "order")
	checkOutcome(t, outer, "executed", 1, otelcodes.Unset)
	inner := tm.callSpan(t, outer.SpanContext(), "pay")
	checkOutcome(t, inner, "executed", 1, otelcodes.Unset)
	if n := len(tm.callSpans()); n != 2 {
		t.Errorf("%d call spans, want 2", n)
	}
	m := tm.metrics(t)
	if m.count("idemkit.call.duration", op("reserve"), outcome("rejected")) != 1 || m.total("idemkit.call.duration") != 3 {
		t.Errorf("idemkit.call.duration: %+v", m.points("idemkit.call.duration"))
	}
}

// TestNoOperation: a call whose operation is unknown has a span named
// "idempotency" and metrics without idemkit.operation.
func TestNoOperation(t *testing.T) {
	tm := newTelemetry(t)
	g := doGuard(t, tm)
	ctx, job := tm.tracer().Start(t.Context(), "job")
	for range 2 {
		if _, _, err := middleware.Do(ctx, g, "k1", 1, func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
	}
	job.End()
	for _, s := range tm.childrenOf(job.SpanContext()) {
		if s.Name() != "idempotency" {
			t.Errorf("span %q, want idempotency", s.Name())
		}
		if _, ok := attrs(s)["idemkit.operation"]; ok {
			t.Error("idemkit.operation on a call without an operation")
		}
	}
	m := tm.metrics(t)
	if m.count("idemkit.call.duration", outcome("executed")) != 1 || m.count("idemkit.call.duration", outcome("replayed")) != 1 {
		t.Errorf("idemkit.call.duration: %+v", m.points("idemkit.call.duration"))
	}
}

// TestNoRecordingSpan: with the default providers (no SDK installed),
// the hook works, records nothing and the call goes on.
func TestNoRecordingSpan(t *testing.T) {
	hook, err := idemkitotel.New()
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New()
	defer s.Close()
	g, err := middleware.New(hook.Store(s), middleware.WithHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	v, replayed, err := middleware.Do(t.Context(), g, "k1", 1, func(context.Context) (int, error) { return 7, nil })
	if err != nil || replayed || v != 7 {
		t.Fatalf("Do: %v %v %v", v, replayed, err)
	}
	v, replayed, err = middleware.Do(t.Context(), g, "k1", 1, func(context.Context) (int, error) { return 8, nil })
	if err != nil || !replayed || v != 7 {
		t.Fatalf("Do again: %v %v %v", v, replayed, err)
	}
}
