package otelsuite_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// telemetry is an SDK tracer provider that records every span and an SDK
// meter provider read on demand, with the hook under test on both.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	hook   *idemkitotel.Hook
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	hook, err := idemkitotel.New(idemkitotel.WithTracerProvider(tp), idemkitotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{spans: rec, tp: tp, reader: reader, hook: hook}
}

// tracer is the tracer of the test's own spans: the server spans around
// the adapters and the work's spans.
func (tm *telemetry) tracer() trace.Tracer { return tm.tp.Tracer("test") }

// childrenOf returns the ended spans whose parent is the span sc.
func (tm *telemetry) childrenOf(sc trace.SpanContext) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Parent().SpanID() == sc.SpanID() && s.Parent().TraceID() == sc.TraceID() {
			out = append(out, s)
		}
	}
	return out
}

// callSpans returns the ended spans the hook made (named "idempotency…").
func (tm *telemetry) callSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if strings.HasPrefix(s.Name(), "idempotency") {
			out = append(out, s)
		}
	}
	return out
}

// callSpan returns the one span the hook made under the server span
// outer, checking what every call span has: its name, kind, parent,
// operation and key hash.
func (tm *telemetry) callSpan(t *testing.T, outer trace.SpanContext, operation string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tm.childrenOf(outer) {
		if strings.HasPrefix(s.Name(), "idempotency") {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d call spans under the server span, want 1 (all spans: %v)", len(found), spanNames(tm.spans.Ended()))
	}
	s := found[0]
	if want := "idempotency " + operation; s.Name() != want {
		t.Errorf("span name %q, want %q", s.Name(), want)
	}
	if s.SpanKind() != trace.SpanKindInternal {
		t.Errorf("span kind %v, want internal", s.SpanKind())
	}
	if s.SpanContext().TraceID() != outer.TraceID() {
		t.Errorf("the call span is in trace %v, the server span in %v", s.SpanContext().TraceID(), outer.TraceID())
	}
	a := attrs(s)
	if v := a["idemkit.operation"]; v.AsString() != operation {
		t.Errorf("idemkit.operation = %q, want %q", v.AsString(), operation)
	}
	if v := a["idemkit.key_hash"].AsString(); len(v) < 16 || strings.Contains(v, "k1") {
		t.Errorf("idemkit.key_hash = %q, want a hash", v)
	}
	return s
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// eventNames returns the names of a span's events.
func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// eventAttrs returns the attributes of a span's first event named name.
func eventAttrs(s sdktrace.ReadOnlySpan, name string) map[attribute.Key]attribute.Value {
	for _, e := range s.Events() {
		if e.Name == name {
			m := map[attribute.Key]attribute.Value{}
			for _, kv := range e.Attributes {
				m[kv.Key] = kv.Value
			}
			return m
		}
	}
	return nil
}

// snapshot is what the meter provider holds at one moment.
type snapshot struct{ rm metricdata.ResourceMetrics }

func (tm *telemetry) metrics(t *testing.T) snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	s := snapshot{rm}
	s.checkAttributes(t)
	return s
}

// point is one data point of any instrument the hook makes.
type point struct {
	attrs attribute.Set
	count uint64  // histograms: the count; counters: the value
	sum   float64 // histograms: the sum
}

// points returns the data points of the instrument name.
func (s snapshot) points(name string) []point {
	var out []point
	for _, sm := range s.rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{dp.Attributes, dp.Count, dp.Sum})
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{dp.Attributes, dp.Count, float64(dp.Sum)})
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{dp.Attributes, uint64(dp.Value), float64(dp.Value)})
				}
			}
		}
	}
	return out
}

// get returns the data point of name whose attributes are exactly kvs
// (the zero point when there is none).
func (s snapshot) get(name string, kvs ...attribute.KeyValue) point {
	want := attribute.NewSet(kvs...)
	for _, p := range s.points(name) {
		if p.attrs.Equals(&want) {
			return p
		}
	}
	return point{}
}

// count is get's count.
func (s snapshot) count(name string, kvs ...attribute.KeyValue) uint64 {
	return s.get(name, kvs...).count
}

// total sums the counts of every data point of name.
func (s snapshot) total(name string) uint64 {
	var n uint64
	for _, p := range s.points(name) {
		n += p.count
	}
	return n
}

// checkAttributes fails t if a data point carries an attribute the hook
// must never put on metrics: anything but the low-cardinality ones.
func (s snapshot) checkAttributes(t *testing.T) {
	t.Helper()
	allowed := map[attribute.Key]bool{
		"idemkit.operation": true, "idemkit.outcome": true,
		"idemkit.backend.operation": true, "idemkit.backend.result": true, "error.type": true,
	}
	for _, sm := range s.rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/idemkit/idemkit/idemkitotel" {
			t.Errorf("instrumentation scope %q, want %q", sm.Scope.Name, "github.com/idemkit/idemkit/idemkitotel")
		}
		for _, m := range sm.Metrics {
			for _, p := range s.points(m.Name) {
				for _, kv := range p.attrs.ToSlice() {
					if !allowed[kv.Key] {
						t.Errorf("%s has the attribute %s", m.Name, kv.Key)
					}
				}
			}
		}
	}
}

// Attribute shorthands.
func op(name string) attribute.KeyValue      { return attribute.String("idemkit.operation", name) }
func outcome(kind string) attribute.KeyValue { return attribute.String("idemkit.outcome", kind) }
func backendOp(name string) attribute.KeyValue {
	return attribute.String("idemkit.backend.operation", name)
}
func result(name string) attribute.KeyValue    { return attribute.String("idemkit.backend.result", name) }
func errorType(code string) attribute.KeyValue { return attribute.String("error.type", code) }

var errOutage = idemkit.NewError(idemkit.CodeServiceUnavailable, "test", "injected outage", nil)

// flakyStore is a memory store whose claims or releases can be made to
// fail as a store whose server went away does.
type flakyStore struct {
	store.Store
	failClaim, failRelease atomic.Bool
}

func newFlakyStore(t *testing.T) *flakyStore {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return &flakyStore{Store: s}
}

func (f *flakyStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	if f.failClaim.Load() {
		return store.Record{}, false, errOutage
	}
	return f.Store.Claim(ctx, key, fp, ttl)
}

func (f *flakyStore) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	if f.failRelease.Load() {
		return false, errOutage
	}
	return f.Store.Release(ctx, key, fence)
}

// business is the work behind every adapter in the tests: it counts its
// executions, starts a span of its own ("work") and, as its flags say,
// blocks until released, forgets its own key (so its outcome cannot be
// recorded), answers a large response or fails.
type business struct {
	guard      *middleware.Guard
	tracer     trace.Tracer
	executions atomic.Int64
	started    chan struct{} // one per blocking execution
	release    chan struct{} // closed to let blocking executions finish
	once       sync.Once
}

// unblock lets blocking executions finish, now and from now on.
func (b *business) unblock() { b.once.Do(func() { close(b.release) }) }

// flags are the business's switches, from a comma-separated list.
type flags struct{ block, forget, large, fail bool }

func parseFlags(s string) flags {
	var f flags
	for _, w := range strings.Split(s, ",") {
		switch w {
		case "block":
			f.block = true
		case "forget":
			f.forget = true
		case "large":
			f.large = true
		case "fail":
			f.fail = true
		}
	}
	return f
}

// responseSize is the size of the business's answer: small, or larger
// than the adapters' capture limit (maxResponse) with the flag large.
func (f flags) responseSize() int {
	if f.large {
		return 4 * maxResponse
	}
	return 16
}

// maxResponse is the capture limit the tests give the adapters.
const maxResponse = 1024

// work runs the business logic under ctx, the guarded call's.
func (b *business) work(ctx context.Context, f flags) {
	ctx, span := b.tracer.Start(ctx, "work")
	defer span.End()
	b.executions.Add(1)
	if f.block {
		b.started <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
		}
	}
	if f.forget {
		// An operator forgets the key while the work runs: the claim is
		// gone, and the outcome cannot be recorded.
		info, _ := middleware.CallInfoFrom(ctx)
		_, _ = b.guard.Forget(context.WithoutCancel(ctx), info.Scope, info.Key, middleware.Force())
	}
}

// servers keeps the server spans around the adapters by the request's
// label (header X-Test-Request, metadata x-test-request), as they end.
type servers struct {
	mu    sync.Mutex
	ended map[string]trace.SpanContext
	cond  chan struct{} // closed and replaced whenever a span ends
}

func newServers() *servers {
	return &servers{ended: map[string]trace.SpanContext{}, cond: make(chan struct{})}
}

// start starts the server span of the request labelled label; done ends
// it and makes it known to await.
func (s *servers) start(ctx context.Context, tr trace.Tracer, name, label string) (context.Context, func()) {
	ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return ctx, func() {
		span.End()
		s.mu.Lock()
		s.ended[label] = span.SpanContext()
		close(s.cond)
		s.cond = make(chan struct{})
		s.mu.Unlock()
	}
}

// await returns the server span of the request labelled label once it
// has ended (its handler has returned, with the guard's outcome).
func (s *servers) await(t *testing.T, label string) trace.SpanContext {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		sc, ok := s.ended[label]
		cond := s.cond
		s.mu.Unlock()
		if ok {
			return sc
		}
		select {
		case <-cond:
		case <-deadline:
			t.Fatalf("the request %q never ended", label)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// waitFor waits for ch to deliver, with a generous guard against hangs.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}
