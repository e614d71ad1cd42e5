package idemkitotel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit/middleware"
)

// TestStepSpans: each step of the work is a span "step <name>" under the
// call's span, with its name, index and result size; a step a later run
// got back from its recovery point is a span with idemkit.step.replayed
// true, and its fn does not run. The store decorator counts each
// recording as a record-step backend operation.
func TestStepSpans(t *testing.T) {
	tm := newTelemetry(t)
	g := doGuard(t, tm)
	failed := errors.New("the mail server is down")
	runs := map[string]int{}
	work := func(fail bool) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			for _, name := range []string{"reserve", "charge"} {
				if _, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
					runs[name]++
					return []byte("id-" + name), nil
				}); err != nil {
					return "", err
				}
			}
			if fail {
				return "", failed
			}
			return "done", nil
		}
	}
	ctx, first := tm.tracer().Start(t.Context(), "first")
	if _, _, err := middleware.Do(ctx, g, "order-1", 1, work(true), middleware.Operation("checkout")); !errors.Is(err, failed) {
		t.Fatalf("first run: %v", err)
	}
	first.End()
	ctx, second := tm.tracer().Start(t.Context(), "second")
	if v, _, err := middleware.Do(ctx, g, "order-1", 1, work(false), middleware.Operation("checkout")); err != nil || v != "done" {
		t.Fatalf("second run: %q, %v", v, err)
	}
	second.End()
	if runs["reserve"] != 1 || runs["charge"] != 1 {
		t.Fatalf("steps ran %v; want once each", runs)
	}
	check := func(run string, replayed bool) {
		t.Helper()
		sc := first.SpanContext()
		if run == "second" {
			sc = second.SpanContext()
		}
		callSpan := tm.callSpan(t, sc, "checkout")
		steps := tm.childrenOf(callSpan.SpanContext())
		if len(steps) != 2 {
			t.Fatalf("%s run: %d spans under the call's; want the two steps", run, len(steps))
		}
		for i, s := range steps {
			name := []string{"reserve", "charge"}[i]
			a := attrs(s)
			if s.Name() != "step "+name || a["idemkit.step.name"].AsString() != name || a["idemkit.step.index"].AsInt64() != int64(i) ||
				a["idemkit.step.replayed"].AsBool() != replayed || a["idemkit.size"].AsInt64() != int64(len("id-"+name)) {
				t.Errorf("%s run, step %d: span %q %v", run, i, s.Name(), s.Attributes())
			}
			if s.EndTime().Before(s.StartTime()) {
				t.Errorf("%s run, step %d: ends before it starts", run, i)
			}
		}
	}
	check("first", false)
	check("second", true)
	m := tm.metrics(t)
	if m.count("idemkit.backend.operations", backendOp("record-step"), result("ok")) != 2 {
		t.Errorf("backend operations: %+v; want the two steps recorded once each", m.points("idemkit.backend.operations"))
	}
}
