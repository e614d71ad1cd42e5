package idemkitotel_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/idemkitotel"
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
func result(name string) attribute.KeyValue { return attribute.String("idemkit.backend.result", name) }

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// checkOutcome checks the end of a call span: its outcome, attempts (any
// number from 1 when attempts is -1) and status.
func checkOutcome(t *testing.T, s sdktrace.ReadOnlySpan, kind string, attempts int64, status otelcodes.Code) {
	t.Helper()
	a := attrs(s)
	if got := a["idemkit.outcome"].AsString(); got != kind {
		t.Errorf("idemkit.outcome = %q, want %q", got, kind)
	}
	if got := a["idemkit.attempts"].AsInt64(); attempts >= 0 && got != attempts || got < 1 {
		t.Errorf("idemkit.attempts = %d, want %d", got, attempts)
	}
	if s.Status().Code != status {
		t.Errorf("status %v (%q), want %v", s.Status().Code, s.Status().Description, status)
	}
}
