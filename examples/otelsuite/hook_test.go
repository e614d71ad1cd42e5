package otelsuite_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scenario drives one outcome through an adapter and checks the span and
// the metrics it left.
type scenario struct {
	name string
	cfg  serverConfig
	run  func(t *testing.T, f *fixture)
}

// TestOutcomes runs every outcome an adapter can reach through net/http,
// gin, echo v4 and v5, gRPC and Connect servers on loopback listeners,
// with real clients, and checks the call's span (its parent is the server span in front of the
// adapter) and the metrics.
func TestOutcomes(t *testing.T) {
	for _, tr := range transports() {
		for _, sc := range scenarios() {
			t.Run(tr.name+"/"+sc.name, func(t *testing.T) {
				f := setup(t, tr, sc.cfg)
				sc.run(t, f)
			})
		}
	}
}

func scenarios() []scenario {
	return []scenario{
		{name: "executed", run: executed},
		{name: "replayed", run: replayed},
		{name: "replayed-after-waiting", run: replayedAfterWaiting},
		{name: "mismatch", run: mismatch},
		{name: "credentials-mismatch", run: credentialsMismatch},
		{name: "in-progress", cfg: serverConfig{noWait: true}, run: inProgress},
		{name: "not-replayable", run: notReplayable},
		{name: "not-recorded", run: notRecorded},
		{name: "executed-not-stored", run: executedNotStored},
		{name: "unavailable", run: unavailable},
		{name: "failed-open", cfg: serverConfig{failOpen: true}, run: failedOpen},
		{name: "canceled", run: canceled},
		{name: "passed-through", run: passedThrough},
		{name: "rejected", run: rejected},
	}
}

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

// checkEvents checks the names of a span's events.
func checkEvents(t *testing.T, s sdktrace.ReadOnlySpan, want ...string) {
	t.Helper()
	if got := eventNames(s); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("span events %v, want %v", got, want)
	}
}

// checkWork checks that the work ran once under the call span.
func checkWork(t *testing.T, f *fixture, s sdktrace.ReadOnlySpan) {
	t.Helper()
	var works int
	for _, c := range f.tm.childrenOf(s.SpanContext()) {
		if c.Name() == "work" {
			works++
		}
	}
	if works != 1 {
		t.Errorf("%d work spans under the call span, want 1", works)
	}
}

// firstExecution sends the request k with body and flags, checks it
// executed, and returns its call span.
func firstExecution(t *testing.T, f *fixture, key, flags string) sdktrace.ReadOnlySpan {
	t.Helper()
	a := f.call(t, request{label: "first", key: key, body: `{"n":1}`, flags: flags})
	f.want(t, "the first request", a, http.StatusCreated, codes.OK, false)
	return f.tm.callSpan(t, f.srv.await(t, "first"), f.tr.operation)
}

func executed(t *testing.T, f *fixture) {
	s := firstExecution(t, f, "k1", "")
	checkOutcome(t, s, "executed", 1, otelcodes.Unset)
	checkEvents(t, s)
	checkWork(t, f, s)
	a := attrs(s)
	if !a["idemkit.recorded"].AsBool() || a["idemkit.fence"].AsInt64() <= 0 || a["idemkit.size"].AsInt64() <= 0 {
		t.Errorf("attributes %v: want recorded, a fence and a size", s.Attributes())
	}
	if _, ok := a["idemkit.ran"]; !ok {
		t.Error("no idemkit.ran")
	}
	if _, ok := a["idemkit.waited"]; ok {
		t.Error("idemkit.waited on a call that did not wait")
	}

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if n := m.count("idemkit.call.duration", o, outcome("executed")); n != 1 || m.total("idemkit.call.duration") != 1 {
		t.Errorf("idemkit.call.duration: %d executed, %d in all; want 1", n, m.total("idemkit.call.duration"))
	}
	if n := m.count("idemkit.execution.duration", o, outcome("executed")); n != 1 {
		t.Errorf("idemkit.execution.duration: %d, want 1", n)
	}
	if p := m.get("idemkit.record.size", o, outcome("executed")); p.count != 1 || int64(p.sum) != a["idemkit.size"].AsInt64() {
		t.Errorf("idemkit.record.size: %+v, want one of %d bytes", p, a["idemkit.size"].AsInt64())
	}
	if m.total("idemkit.wait.duration") != 0 || m.total("idemkit.calls.not_recorded") != 0 {
		t.Error("a wait or an unrecorded call was counted")
	}
	// A first execution is two backend operations: claim, complete.
	if m.count("idemkit.backend.operations", backendOp("claim"), result("claimed")) != 1 ||
		m.count("idemkit.backend.operations", backendOp("complete"), result("ok")) != 1 ||
		m.total("idemkit.backend.operations") != 2 {
		t.Errorf("backend operations: %+v; want one claim (claimed) and one complete (ok)", m.points("idemkit.backend.operations"))
	}
	if m.count("idemkit.backend.duration", backendOp("claim"), result("claimed")) != 1 || m.total("idemkit.backend.duration") != 2 {
		t.Errorf("backend durations: %+v", m.points("idemkit.backend.duration"))
	}
}

func replayed(t *testing.T, f *fixture) {
	first := firstExecution(t, f, "k1", "")
	a := f.call(t, request{label: "retry", key: "k1", body: `{"n":1}`})
	f.want(t, "the retry", a, http.StatusCreated, codes.OK, true)
	s := f.tm.callSpan(t, f.srv.await(t, "retry"), f.tr.operation)
	checkOutcome(t, s, "replayed", 1, otelcodes.Unset)
	checkEvents(t, s)
	fa, sa := attrs(first), attrs(s)
	if sa["idemkit.size"].AsInt64() != fa["idemkit.size"].AsInt64() || sa["idemkit.fence"].AsInt64() != fa["idemkit.fence"].AsInt64() {
		t.Errorf("the replay's size and fence %v, want the execution's %v", s.Attributes(), first.Attributes())
	}
	if _, ok := sa["idemkit.recorded"]; ok {
		t.Error("idemkit.recorded on a replay")
	}
	if len(f.tm.childrenOf(s.SpanContext())) != 0 || f.biz.executions.Load() != 1 {
		t.Error("the work ran for the replay")
	}
	if first.SpanContext().TraceID() == s.SpanContext().TraceID() {
		t.Error("the retry's span is in the first request's trace")
	}

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.call.duration", o, outcome("replayed")) != 1 || m.count("idemkit.call.duration", o, outcome("executed")) != 1 {
		t.Errorf("idemkit.call.duration: %+v", m.points("idemkit.call.duration"))
	}
	if p := m.get("idemkit.record.size", o, outcome("replayed")); p.count != 1 || int64(p.sum) != sa["idemkit.size"].AsInt64() {
		t.Errorf("idemkit.record.size of replays: %+v", p)
	}
	if m.count("idemkit.execution.duration", o, outcome("replayed")) != 0 {
		t.Error("an execution was counted for the replay")
	}
	// A replay is one backend operation: a claim that finds the outcome.
	if m.count("idemkit.backend.operations", backendOp("claim"), result("done")) != 1 || m.total("idemkit.backend.operations") != 3 {
		t.Errorf("backend operations: %+v", m.points("idemkit.backend.operations"))
	}
}

func replayedAfterWaiting(t *testing.T, f *fixture) {
	firstDone := make(chan answer, 1)
	go func() { firstDone <- f.call(t, request{label: "first", key: "k1", body: `{"n":1}`, flags: "block"}) }()
	waitFor(t, f.biz.started, "the first execution")
	retryDone := make(chan answer, 1)
	go func() { retryDone <- f.call(t, request{label: "retry", key: "k1", body: `{"n":1}`, flags: "block"}) }()
	waitFor(t, f.waiting, "the retry to wait")
	f.biz.unblock()
	f.want(t, "the first request", waitFor(t, firstDone, "the first answer"), http.StatusCreated, codes.OK, false)
	f.want(t, "the retry", waitFor(t, retryDone, "the retry's answer"), http.StatusCreated, codes.OK, true)

	first := f.tm.callSpan(t, f.srv.await(t, "first"), f.tr.operation)
	s := f.tm.callSpan(t, f.srv.await(t, "retry"), f.tr.operation)
	a := attrs(s)
	if a["idemkit.outcome"].AsString() != "replayed" || a["idemkit.attempts"].AsInt64() < 2 || a["idemkit.waited"].AsFloat64() <= 0 {
		t.Errorf("the retry's span: %v; want replayed after two attempts or more and a wait", s.Attributes())
	}
	checkEvents(t, s, "waiting")
	if ev := eventAttrs(s, "waiting"); ev["idemkit.fence"].AsInt64() != attrs(first)["idemkit.fence"].AsInt64() {
		t.Errorf("the waiting event's fence %v, want the running claim's %v", ev["idemkit.fence"], attrs(first)["idemkit.fence"])
	}

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if p := m.get("idemkit.wait.duration", o, outcome("replayed")); p.count != 1 || p.sum <= 0 {
		t.Errorf("idemkit.wait.duration: %+v; want one wait", m.points("idemkit.wait.duration"))
	}
	if m.count("idemkit.wait.duration", o, outcome("executed")) != 0 {
		t.Error("a wait was counted for the first execution")
	}
	if m.count("idemkit.backend.operations", backendOp("claim"), result("busy")) < 1 {
		t.Errorf("no busy claim: %+v", m.points("idemkit.backend.operations"))
	}
}

// refused checks a second request with key k1 that the adapter refuses
// with the guard's outcome kind, after a first execution.
func refused(t *testing.T, f *fixture, second request, httpStatus int, grpcCode codes.Code, kind string) {
	t.Helper()
	first := firstExecution(t, f, "k1", "")
	second.label, second.key = "second", "k1"
	f.want(t, "the second request", f.call(t, second), httpStatus, grpcCode, false)
	s := f.tm.callSpan(t, f.srv.await(t, "second"), f.tr.operation)
	checkOutcome(t, s, kind, 1, otelcodes.Unset)
	checkEvents(t, s)
	if attrs(s)["idemkit.fence"].AsInt64() != attrs(first)["idemkit.fence"].AsInt64() {
		t.Errorf("fence %v, want the record's %v", attrs(s)["idemkit.fence"], attrs(first)["idemkit.fence"])
	}
	m := f.tm.metrics(t)
	if n := m.count("idemkit.call.duration", op(f.tr.operation), outcome(kind)); n != 1 || m.total("idemkit.call.duration") != 2 {
		t.Errorf("idemkit.call.duration: %+v; want one %s", m.points("idemkit.call.duration"), kind)
	}
	if m.total("idemkit.calls.not_recorded") != 0 || f.biz.executions.Load() != 1 {
		t.Error("the refused request ran")
	}
}

func mismatch(t *testing.T, f *fixture) {
	refused(t, f, request{body: `{"n":2}`}, http.StatusUnprocessableEntity, codes.FailedPrecondition, "mismatch")
}

func credentialsMismatch(t *testing.T, f *fixture) {
	refused(t, f, request{body: `{"n":1}`, auth: "Bearer mallory"}, http.StatusUnprocessableEntity, codes.FailedPrecondition, "credentials-mismatch")
}

func inProgress(t *testing.T, f *fixture) {
	firstDone := make(chan answer, 1)
	go func() { firstDone <- f.call(t, request{label: "first", key: "k1", body: `{"n":1}`, flags: "block"}) }()
	waitFor(t, f.biz.started, "the first execution")
	a := f.call(t, request{label: "second", key: "k1", body: `{"n":1}`, flags: "block"})
	f.want(t, "the duplicate", a, http.StatusConflict, codes.Aborted, false)
	s := f.tm.callSpan(t, f.srv.await(t, "second"), f.tr.operation)
	checkOutcome(t, s, "in-progress", 1, otelcodes.Unset)
	checkEvents(t, s)
	f.biz.unblock()
	f.want(t, "the first request", waitFor(t, firstDone, "the first answer"), http.StatusCreated, codes.OK, false)
	f.srv.await(t, "first")

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.call.duration", o, outcome("in-progress")) != 1 || m.count("idemkit.call.duration", o, outcome("executed")) != 1 {
		t.Errorf("idemkit.call.duration: %+v", m.points("idemkit.call.duration"))
	}
	if m.total("idemkit.wait.duration") != 0 {
		t.Error("a wait was counted for a call told in progress at once")
	}
	if m.count("idemkit.backend.operations", backendOp("claim"), result("busy")) != 1 {
		t.Errorf("backend operations: %+v; want one busy claim", m.points("idemkit.backend.operations"))
	}
}

func notReplayable(t *testing.T, f *fixture) {
	first := firstExecution(t, f, "k1", "large")
	if a := attrs(first); !a["idemkit.recorded"].AsBool() {
		t.Errorf("the large response's execution: %v; want recorded (as not replayable)", first.Attributes())
	}
	a := f.call(t, request{label: "retry", key: "k1", body: `{"n":1}`, flags: "large"})
	f.want(t, "the retry", a, http.StatusConflict, codes.FailedPrecondition, false)
	s := f.tm.callSpan(t, f.srv.await(t, "retry"), f.tr.operation)
	checkOutcome(t, s, "not-replayable", 1, otelcodes.Unset)

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.call.duration", o, outcome("not-replayable")) != 1 {
		t.Errorf("idemkit.call.duration: %+v", m.points("idemkit.call.duration"))
	}
	if m.total("idemkit.record.size") != 0 {
		t.Errorf("idemkit.record.size counted a response that was not kept: %+v", m.points("idemkit.record.size"))
	}
}

func notRecorded(t *testing.T, f *fixture) {
	s := firstExecution(t, f, "k1", "forget")
	checkOutcome(t, s, "not-recorded", 1, otelcodes.Error)
	checkEvents(t, s, "lease-lost")
	checkWork(t, f, s)
	a := attrs(s)
	if a["error.type"].AsString() != "lease-lost" {
		t.Errorf("error.type = %q, want lease-lost", a["error.type"].AsString())
	}
	if _, ok := a["idemkit.ran"]; !ok {
		t.Error("no idemkit.ran")
	}

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.calls.not_recorded", o, outcome("not-recorded")) != 1 || m.count("idemkit.execution.duration", o, outcome("not-recorded")) != 1 {
		t.Errorf("not recorded: %+v, executions %+v", m.points("idemkit.calls.not_recorded"), m.points("idemkit.execution.duration"))
	}
	if m.count("idemkit.backend.operations", backendOp("delete"), result("ok")) != 1 ||
		m.count("idemkit.backend.operations", backendOp("complete"), result("refused")) != 1 {
		t.Errorf("backend operations: %+v; want the operator's delete and a refused complete", m.points("idemkit.backend.operations"))
	}
}

func executedNotStored(t *testing.T, f *fixture) {
	// The handler fails (not recorded: the claim is released), and the
	// release fails too: a backend error while the call goes on.
	f.store.failRelease.Store(true)
	a := f.call(t, request{label: "first", key: "k1", body: `{"n":1}`, flags: "fail"})
	f.want(t, "the failing request", a, http.StatusInternalServerError, codes.Internal, false)
	s := f.tm.callSpan(t, f.srv.await(t, "first"), f.tr.operation)
	checkOutcome(t, s, "executed", 1, otelcodes.Unset)
	checkEvents(t, s, "backend-error")
	if ev := eventAttrs(s, "backend-error"); ev["idemkit.backend.operation"].AsString() != "release" || ev["error.type"].AsString() != "ServiceUnavailable" {
		t.Errorf("the backend-error event: %v", ev)
	}
	if at := attrs(s); at["idemkit.recorded"].AsBool() {
		t.Error("recorded")
	}

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.calls.not_recorded", o, outcome("executed")) != 1 || m.total("idemkit.record.size") != 0 {
		t.Errorf("not recorded: %+v; sizes %+v", m.points("idemkit.calls.not_recorded"), m.points("idemkit.record.size"))
	}
	if m.count("idemkit.backend.operations", backendOp("release"), result("error"), errorType("ServiceUnavailable")) != 1 {
		t.Errorf("backend operations: %+v; want the failed release", m.points("idemkit.backend.operations"))
	}
}

func unavailable(t *testing.T, f *fixture) {
	f.store.failClaim.Store(true)
	a := f.call(t, request{label: "first", key: "k1", body: `{"n":1}`})
	f.want(t, "the request", a, http.StatusServiceUnavailable, codes.Unavailable, false)
	s := f.tm.callSpan(t, f.srv.await(t, "first"), f.tr.operation)
	checkOutcome(t, s, "unavailable", 1, otelcodes.Error)
	if at := attrs(s); at["error.type"].AsString() != "ServiceUnavailable" {
		t.Errorf("error.type = %q", at["error.type"].AsString())
	}
	if f.biz.executions.Load() != 0 || len(f.tm.childrenOf(s.SpanContext())) != 0 {
		t.Error("the work ran")
	}
	m := f.tm.metrics(t)
	if m.count("idemkit.call.duration", op(f.tr.operation), outcome("unavailable")) != 1 {
		t.Errorf("idemkit.call.duration: %+v", m.points("idemkit.call.duration"))
	}
	if m.count("idemkit.backend.operations", backendOp("claim"), result("error"), errorType("ServiceUnavailable")) != 1 ||
		m.count("idemkit.backend.duration", backendOp("claim"), result("error"), errorType("ServiceUnavailable")) != 1 {
		t.Errorf("backend operations: %+v", m.points("idemkit.backend.operations"))
	}
}

func failedOpen(t *testing.T, f *fixture) {
	f.store.failClaim.Store(true)
	a := f.call(t, request{label: "first", key: "k1", body: `{"n":1}`})
	f.want(t, "the request", a, http.StatusCreated, codes.OK, false)
	s := f.tm.callSpan(t, f.srv.await(t, "first"), f.tr.operation)
	checkOutcome(t, s, "failed-open", 1, otelcodes.Unset)
	checkWork(t, f, s)
	if at := attrs(s); at["error.type"].AsString() != "ServiceUnavailable" {
		t.Errorf("error.type = %q, want the backend's failure", at["error.type"].AsString())
	}
	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.calls.not_recorded", o, outcome("failed-open")) != 1 || m.count("idemkit.execution.duration", o, outcome("failed-open")) != 1 {
		t.Errorf("failed open: %+v, %+v", m.points("idemkit.calls.not_recorded"), m.points("idemkit.execution.duration"))
	}
}

func canceled(t *testing.T, f *fixture) {
	firstDone := make(chan answer, 1)
	go func() { firstDone <- f.call(t, request{label: "first", key: "k1", body: `{"n":1}`, flags: "block"}) }()
	waitFor(t, f.biz.started, "the first execution")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	retryDone := make(chan answer, 1)
	go func() {
		retryDone <- f.client.call(ctx, request{label: "retry", key: "k1", body: `{"n":1}`, flags: "block"})
	}()
	waitFor(t, f.waiting, "the retry to wait")
	cancel() // the client goes away while its request waits
	waitFor(t, retryDone, "the retry to give up")
	s := f.tm.callSpan(t, f.srv.await(t, "retry"), f.tr.operation)
	checkOutcome(t, s, "canceled", -1, otelcodes.Unset)
	checkEvents(t, s, "waiting")
	f.biz.unblock()
	f.want(t, "the first request", waitFor(t, firstDone, "the first answer"), http.StatusCreated, codes.OK, false)
	f.srv.await(t, "first")

	m := f.tm.metrics(t)
	o := op(f.tr.operation)
	if m.count("idemkit.call.duration", o, outcome("canceled")) != 1 || m.count("idemkit.wait.duration", o, outcome("canceled")) != 1 {
		t.Errorf("canceled: %+v, waits %+v", m.points("idemkit.call.duration"), m.points("idemkit.wait.duration"))
	}
}

// noCallSpan checks that the request whose server span is outer made no
// call span: what ran, ran under the server span.
func noCallSpan(t *testing.T, f *fixture, outer trace.SpanContext, work int) {
	t.Helper()
	spans := f.tm.childrenOf(outer)
	if len(f.tm.callSpans()) != 0 || len(spans) != work {
		t.Errorf("spans under the server span: %v; want %d work span(s) and no call span", spanNames(spans), work)
	}
}

// bypassed checks the metrics of a request the adapter handled without
// the guard.
func bypassed(t *testing.T, f *fixture, operation, kind string) {
	t.Helper()
	m := f.tm.metrics(t)
	if p := m.get("idemkit.call.duration", op(operation), outcome(kind)); p.count != 1 || p.sum != 0 || m.total("idemkit.call.duration") != 1 {
		t.Errorf("idemkit.call.duration: %+v; want one %s of no duration", m.points("idemkit.call.duration"), kind)
	}
	if m.total("idemkit.backend.operations") != 0 {
		t.Errorf("backend operations: %+v; want none", m.points("idemkit.backend.operations"))
	}
}

func passedThrough(t *testing.T, f *fixture) {
	a := f.client.passThrough(t.Context(), "plain")
	f.want(t, "the unguarded request", a, http.StatusCreated, codes.OK, false)
	work := 1
	if f.tr.grpc {
		work = 0 // EmptyCall does no work
	}
	noCallSpan(t, f, f.srv.await(t, "plain"), work)
	bypassed(t, f, f.tr.passOperation, "passed-through")
}

func rejected(t *testing.T, f *fixture) {
	a := f.call(t, request{label: "bad", key: strings.Repeat("k", 300), body: `{"n":1}`})
	f.want(t, "the request with a malformed key", a, http.StatusBadRequest, codes.InvalidArgument, false)
	noCallSpan(t, f, f.srv.await(t, "bad"), 0)
	bypassed(t, f, f.tr.operation, "rejected")
	if f.biz.executions.Load() != 0 {
		t.Error("the work ran")
	}
}
