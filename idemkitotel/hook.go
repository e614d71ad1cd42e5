package idemkitotel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
)

// scopeName is the instrumentation scope of the hook's tracer and meter
// (the package doc names it).
const scopeName = "github.com/idemkit/idemkit/idemkitotel"

// The attribute keys the hook sets. Metrics carry only the low-cardinality
// ones (operation, outcome, and the backend's operation, result and error
// type); the hashes and per-call numbers are on spans only.
const (
	keyOperation = attribute.Key("idemkit.operation")
	keyOutcome   = attribute.Key("idemkit.outcome")
	keyHash      = attribute.Key("idemkit.key_hash")
	keyScopeHash = attribute.Key("idemkit.scope_hash")
	keyFence     = attribute.Key("idemkit.fence")
	keyAttempts  = attribute.Key("idemkit.attempts")
	keyWaited    = attribute.Key("idemkit.waited")
	keyRan       = attribute.Key("idemkit.ran")
	keyRecorded  = attribute.Key("idemkit.recorded")
	keySize      = attribute.Key("idemkit.size")
	keyBackendOp = attribute.Key("idemkit.backend.operation")
	keyResult    = attribute.Key("idemkit.backend.result")
	keyErrorType = attribute.Key("error.type")

	keyStepName     = attribute.Key("idemkit.step.name")
	keyStepIndex    = attribute.Key("idemkit.step.index")
	keyStepReplayed = attribute.Key("idemkit.step.replayed")
)

// Option configures [New].
type Option func(*config)

type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider sets the provider of the hook's tracer. Default:
// otel.GetTracerProvider() (a global set later is followed too); nil
// restores it.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the provider of the hook's meter. Default:
// otel.GetMeterProvider(); nil restores it.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// Hook is a [middleware.Hook] that turns the guard's events into
// OpenTelemetry spans and metrics; wrap the guard's store with
// [Hook.Store] to measure the backend too. It is safe for concurrent use.
type Hook struct {
	tracer trace.Tracer

	callDuration    metric.Float64Histogram
	waitDuration    metric.Float64Histogram
	execDuration    metric.Float64Histogram
	recordSize      metric.Int64Histogram
	notRecorded     metric.Int64Counter
	backendOps      metric.Int64Counter
	backendDuration metric.Float64Histogram

	calls     sync.Map     // callAttrs → *attrOpts: the attribute sets of calls
	ncalls    atomic.Int64 // entries in calls
	names     sync.Map     // operation → span name
	nnames    atomic.Int64 // entries in names
	startOpts []trace.SpanStartOption
	backend   backendAttrs // the attribute sets of backend operations, made by New
}

var _ middleware.Hook = (*Hook)(nil)

// maxCachedSets bounds the attribute sets of calls and the span names the
// hook keeps made: past it (an operation with too many distinct values),
// they are made for each call.
const maxCachedSets = 4096

// durationBounds returns the bucket boundaries of the duration histograms,
// in seconds: from 100 µs (a replay from memory or a Redis round trip) to
// 10 s (a long execution).
func durationBounds() []float64 {
	return []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// sizeBounds returns the bucket boundaries of idemkit.record.size, in
// bytes: 64 B to 4 MiB by powers of four.
func sizeBounds() []float64 {
	return []float64{64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304}
}

// New returns a hook that reports to the tracer and meter of its providers
// (see [WithTracerProvider] and [WithMeterProvider]). It fails only when
// the meter refuses to create an instrument.
func New(opts ...Option) (*Hook, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	h := &Hook{tracer: cfg.tp.Tracer(scopeName)}
	m := cfg.mp.Meter(scopeName)
	var errs [7]error
	h.callDuration, errs[0] = m.Float64Histogram("idemkit.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of guarded calls, by operation and outcome; its count is the number of calls."),
		metric.WithExplicitBucketBoundaries(durationBounds()...))
	h.waitDuration, errs[1] = m.Float64Histogram("idemkit.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time guarded calls spent waiting for a running duplicate, for the calls that waited."),
		metric.WithExplicitBucketBoundaries(durationBounds()...))
	h.execDuration, errs[2] = m.Float64Histogram("idemkit.execution.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the guarded work ran, for the calls that ran it."),
		metric.WithExplicitBucketBoundaries(durationBounds()...))
	h.recordSize, errs[3] = m.Int64Histogram("idemkit.record.size", metric.WithUnit("By"),
		metric.WithDescription("Size of the responses recorded (executed) and replayed."),
		metric.WithExplicitBucketBoundaries(sizeBounds()...))
	h.notRecorded, errs[4] = m.Int64Counter("idemkit.calls.not_recorded", metric.WithUnit("{call}"),
		metric.WithDescription("Calls whose work ran and whose outcome was not stored."))
	h.backendOps, errs[5] = m.Int64Counter("idemkit.backend.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Operations on the guard's backend, by operation and result."))
	h.backendDuration, errs[6] = m.Float64Histogram("idemkit.backend.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of operations on the guard's backend, by operation and result."),
		metric.WithExplicitBucketBoundaries(durationBounds()...))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "the meter refused an instrument", err)
	}
	h.backend = newBackendAttrs()
	h.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	return h, nil
}

// callState is what the hook keeps of one started call: the context the
// call goes on with (the span's, answering stateKey with itself, so one
// allocation serves both).
type callState struct {
	context.Context
	span   trace.Span
	waited atomic.Bool // the call reported EventWaiting
}

type stateKey struct{}

// Value answers stateKey with the call's state, and the rest from the
// span's context.
func (c *callState) Value(key any) any {
	if key == (stateKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// IdempotencyStart starts the call's span, a child of the span in ctx (an
// HTTP or gRPC server span), and returns ctx with it: the work's spans
// are its children.
func (h *Hook) IdempotencyStart(ctx context.Context, e middleware.Event) context.Context {
	ctx, span := h.tracer.Start(ctx, h.spanName(e.Operation), h.startOpts...)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 3)
		if e.Operation != "" {
			attrs = append(attrs, keyOperation.String(e.Operation))
		}
		if e.KeyHash != "" {
			attrs = append(attrs, keyHash.String(e.KeyHash))
		}
		if e.ScopeHash != "" {
			attrs = append(attrs, keyScopeHash.String(e.ScopeHash))
		}
		span.SetAttributes(attrs...)
	}
	return &callState{Context: ctx, span: span}
}

// IdempotencyEvent adds the call's intermediate events to its span and,
// at its outcome, records the call's metrics and ends its span.
func (h *Hook) IdempotencyEvent(ctx context.Context, e middleware.Event) {
	st := stateOf(ctx, e.Kind)
	switch e.Kind {
	case middleware.EventWaiting:
		if st != nil {
			st.waited.Store(true)
			st.span.AddEvent(e.Kind.String(), trace.WithAttributes(eventAttrs(e)...))
		}
		return
	case middleware.EventLeaseLost, middleware.EventBackendError:
		if st != nil {
			st.span.AddEvent(e.Kind.String(), trace.WithAttributes(eventAttrs(e)...))
		}
		return
	case middleware.EventStepRecorded, middleware.EventStepReplayed:
		if st != nil {
			h.step(st, e)
		}
		return
	}
	if !e.Kind.Outcome() {
		return
	}
	h.measure(ctx, e, st)
	if st != nil {
		h.end(st.span, e)
	}
}

// step records a step of the work ([middleware.Step]) as a span under the
// call's, named "step <name>": from when the step began to its recording
// for a step that ran, an instant for one replayed from its recovery
// point (idemkit.step.replayed).
func (h *Hook) step(st *callState, e middleware.Event) {
	end := time.Now()
	_, span := h.tracer.Start(st, "step "+e.StepName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(end.Add(-e.Ran)))
	if span.IsRecording() {
		span.SetAttributes(keyStepName.String(e.StepName), keyStepIndex.Int(e.StepIndex),
			keyStepReplayed.Bool(e.Kind == middleware.EventStepReplayed), keySize.Int(e.Size))
	}
	span.End(trace.WithTimestamp(end))
}

// stateOf returns the state of the call an event of kind belongs to, nil
// for a call the hook did not start: an outcome without a start (passed
// through or rejected) finds no state of its own in ctx, only perhaps an
// enclosing call's, which it must not touch.
func stateOf(ctx context.Context, kind middleware.EventKind) *callState {
	if kind == middleware.EventPassedThrough || kind == middleware.EventRejected {
		return nil
	}
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

// eventAttrs returns the attributes of an intermediate span event: the
// claim's fence and, for failures, the backend operation and the error's
// code.
func eventAttrs(e middleware.Event) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3)
	if e.Fence != 0 {
		attrs = append(attrs, keyFence.Int64(int64(e.Fence)))
	}
	if e.Err != nil {
		var ue *middleware.UnavailableError
		if errors.As(e.Err, &ue) {
			attrs = append(attrs, keyBackendOp.String(ue.Op))
		}
		attrs = append(attrs, keyErrorType.String(errorType(e.Err)))
	}
	return attrs
}

// errorType names an error for the error.type attribute: its idemkit code
// ("ServiceUnavailable"), "lease-lost" for a lost claim, or "_OTHER".
func errorType(err error) string {
	switch code := idemkit.CodeOf(err); {
	case code != idemkit.CodeUnknown:
		return code.String()
	case errors.Is(err, idemkit.ErrLeaseLost):
		return "lease-lost"
	}
	return "_OTHER"
}

// measure records the metrics of a call's outcome e.
func (h *Hook) measure(ctx context.Context, e middleware.Event, st *callState) {
	set := h.callSet(e.Operation, e.Kind)
	h.callDuration.Record(ctx, e.Duration.Seconds(), set.record...)
	waited := e.Waited > 0 && e.Attempts > 1
	if st != nil {
		waited = st.waited.Load()
	}
	if waited {
		h.waitDuration.Record(ctx, e.Waited.Seconds(), set.record...)
	}
	switch e.Kind {
	case middleware.EventExecuted:
		h.execDuration.Record(ctx, e.Ran.Seconds(), set.record...)
		if e.Recorded && e.Size > 0 {
			h.recordSize.Record(ctx, int64(e.Size), set.record...)
		} else if !e.Recorded {
			h.notRecorded.Add(ctx, 1, set.add...)
		}
	case middleware.EventNotRecorded, middleware.EventFailedOpen:
		h.execDuration.Record(ctx, e.Ran.Seconds(), set.record...)
		h.notRecorded.Add(ctx, 1, set.add...)
	case middleware.EventReplayed:
		if e.Size > 0 {
			h.recordSize.Record(ctx, int64(e.Size), set.record...)
		}
	}
}

// end sets the outcome's attributes and status on span and ends it.
func (h *Hook) end(span trace.Span, e middleware.Event) {
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 8)
		attrs = append(attrs, keyOutcome.String(e.Kind.String()), keyAttempts.Int(e.Attempts))
		if e.Fence != 0 {
			attrs = append(attrs, keyFence.Int64(int64(e.Fence)))
		}
		if e.Waited > 0 {
			attrs = append(attrs, keyWaited.Float64(e.Waited.Seconds()))
		}
		switch e.Kind {
		case middleware.EventExecuted:
			attrs = append(attrs, keyRecorded.Bool(e.Recorded), keyRan.Float64(e.Ran.Seconds()))
			if e.Recorded {
				attrs = append(attrs, keySize.Int(e.Size))
			}
		case middleware.EventNotRecorded, middleware.EventFailedOpen:
			attrs = append(attrs, keyRan.Float64(e.Ran.Seconds()))
		case middleware.EventReplayed:
			attrs = append(attrs, keySize.Int(e.Size))
		}
		failed := e.Kind == middleware.EventUnavailable || e.Kind == middleware.EventNotRecorded ||
			(e.Kind == middleware.EventExecuted && e.Err != nil)
		if (failed || e.Kind == middleware.EventFailedOpen) && e.Err != nil {
			attrs = append(attrs, keyErrorType.String(errorType(e.Err)))
		}
		span.SetAttributes(attrs...)
		if failed {
			msg := e.Kind.String()
			if e.Err != nil {
				msg = e.Err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
	}
	span.End()
}

// spanName returns the name of a call's span: "idempotency " and the
// operation, or "idempotency" when it is unknown.
func (h *Hook) spanName(operation string) string {
	if operation == "" {
		return "idempotency"
	}
	if v, ok := h.names.Load(operation); ok {
		return v.(string)
	}
	name := "idempotency " + operation
	if h.nnames.Load() < maxCachedSets {
		if _, loaded := h.names.LoadOrStore(operation, name); !loaded {
			h.nnames.Add(1)
		}
	}
	return name
}

// callAttrs keys the attribute set of a call's metrics.
type callAttrs struct {
	operation string
	kind      middleware.EventKind
}

// attrOpts are the measurement options of one attribute set, made once,
// for each kind of instrument: passed as they are, they cost no
// allocation per measurement.
type attrOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newAttrOpts(set attribute.Set) *attrOpts {
	o := metric.WithAttributeSet(set)
	return &attrOpts{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// callSet returns the measurement options with the attributes of a
// call's metrics: its operation (left out when unknown) and its outcome.
func (h *Hook) callSet(operation string, kind middleware.EventKind) *attrOpts {
	k := callAttrs{operation, kind}
	if v, ok := h.calls.Load(k); ok {
		return v.(*attrOpts)
	}
	var set attribute.Set
	if operation == "" {
		set = attribute.NewSet(keyOutcome.String(kind.String()))
	} else {
		set = attribute.NewSet(keyOperation.String(operation), keyOutcome.String(kind.String()))
	}
	opts := newAttrOpts(set)
	if h.ncalls.Load() < maxCachedSets {
		if v, loaded := h.calls.LoadOrStore(k, opts); loaded {
			return v.(*attrOpts)
		}
		h.ncalls.Add(1)
	}
	return opts
}
