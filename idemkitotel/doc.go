// Package idemkitotel reports what the idempotency guard does to
// OpenTelemetry: a span per guarded call, under the request's own span, and
// metrics of every call's outcome and of the backend's operations.
//
//	hook, err := idemkitotel.New() // the global tracer and meter providers
//	...
//	guard, err := middleware.New(hook.Store(backend), middleware.WithHook(hook))
//
// [Hook] is a middleware.Hook; [Hook.Store] wraps the guard's backend to
// count and time its operations. Neither adds a round trip to the backend:
// the hook only listens to the guard's events, and the store decorator
// only wraps the calls the guard makes anyway.
//
// # Spans
//
// Each call the guard handles (an adapter's guarded request, a
// middleware.Do) gets one span of kind internal, started when the call
// starts as a child of the span in its context (the server span of an
// HTTP or gRPC instrumentation in front of the adapter), and ended at its
// outcome. The work runs under it: spans the handler starts are its
// children. Its name is "idempotency " followed by the operation (the route
// pattern, gin's FullPath, echo's Path, the gRPC full method), or
// "idempotency" when the adapter does not know it.
//
//	attribute              type     set
//	idemkit.operation      string   at the start, when known
//	idemkit.key_hash       string   at the start: the key, hashed by the guard (middleware.WithSecret)
//	idemkit.scope_hash     string   at the start, when the call has a scope
//	idemkit.outcome        string   at the end: executed, replayed, mismatch, ... (middleware.EventKind)
//	idemkit.attempts       int      at the end: claims the call made
//	idemkit.fence          int      at the end: the fence of the claim the work ran under, or of the replayed record
//	idemkit.waited         double   at the end, after a wait: seconds spent waiting for a running duplicate
//	idemkit.ran            double   at the end, when the work ran: seconds it ran
//	idemkit.recorded       bool     at the end of an execution: whether its outcome was stored
//	idemkit.size           int      at the end: bytes of the response recorded or replayed
//	error.type             string   at the end of a failure, and of failed-open: the idemkit code ("ServiceUnavailable"), "lease-lost" or "_OTHER"
//
// Its events are the guard's intermediate events: "waiting" (another request
// holds the key: this call waits for its outcome), "lease-lost" and
// "backend-error", with the claim's fence, the backend operation that
// failed (idemkit.backend.operation) and the error's type (error.type). Its
// status is Error for the outcomes unavailable, not-recorded, and executed
// with an error of the work; unset otherwise (a refusal such as mismatch
// is the client's mistake, not the service's failure).
//
// Requests that never reach the guard (passed-through, rejected by the
// adapter) get no span: only metrics.
//
// # Metrics
//
// Every instrument follows the OpenTelemetry naming rules (names in dotted
// lower case, units in UCUM, durations as histograms in seconds, no unit
// or "total" in names) and carries only low-cardinality attributes: never a
// key nor a hash. idemkit.operation is left out when the operation is
// unknown; it must have few distinct values (see middleware.Operation).
//
//	name                        instrument       unit          attributes                                       meaning
//	idemkit.call.duration       histogram        s             idemkit.operation, idemkit.outcome               duration of every call, from its start to its outcome; its count is the number of calls by operation and outcome (requests an adapter passed through or rejected count with a duration of 0: the guard does not time them)
//	idemkit.wait.duration       histogram        s             idemkit.operation, idemkit.outcome               time spent waiting for a running duplicate, for the calls that waited (outcome replayed, in-progress, mismatch, canceled, ...)
//	idemkit.execution.duration  histogram        s             idemkit.operation, idemkit.outcome               time the work ran, for the calls that ran it (executed, not-recorded, failed-open)
//	idemkit.record.size         histogram        By            idemkit.operation, idemkit.outcome               bytes of the responses recorded (executed and stored) and replayed (an execution recorded as not replayable keeps no response and is not counted)
//	idemkit.calls.not_recorded  counter          {call}        idemkit.operation, idemkit.outcome               calls whose work ran and whose outcome was not stored: executed with an error of the work or a response the adapter does not keep (a retry runs the work again), not-recorded (retries are told "in progress" until the claim runs out), failed-open
//	idemkit.backend.operations  counter          {operation}   idemkit.backend.operation, idemkit.backend.result, error.type   operations on the backend (from Hook.Store)
//	idemkit.backend.duration    histogram        s             idemkit.backend.operation, idemkit.backend.result, error.type   their durations
//
// idemkit.outcome is one of executed, not-recorded, replayed, mismatch,
// credentials-mismatch, in-progress, not-replayable, unavailable, canceled,
// failed-open, passed-through, rejected. idemkit.backend.operation is claim,
// extend, complete, release, get, delete or commit (the commit of a
// transaction the work began with the outcome, on a store.Transactor such
// as pgstore's); idemkit.backend.result is, for
// a claim, claimed (a new claim), busy (another call's live claim) or done
// (a recorded outcome); for the others ok (it took effect; get: found;
// delete: deleted) or refused (the record no longer carries the claim;
// get, delete: no record); and error for a failure, whose idemkit code
// ("ServiceUnavailable", "NetworkTimeout", ...) is error.type.
//
// Duration buckets run from 100 µs to 10 s; size buckets from 64 B to
// 4 MiB.
//
// # Prometheus
//
// With the OpenTelemetry Prometheus exporter
// (go.opentelemetry.io/otel/exporters/prometheus) as the meter provider's
// reader, serve its registry with promhttp. Names become Prometheus names
// with their unit and type suffixes, dots and other characters becoming
// underscores:
//
//	idemkit.call.duration       idemkit_call_duration_seconds_bucket, _sum, _count
//	idemkit.wait.duration       idemkit_wait_duration_seconds_...
//	idemkit.execution.duration  idemkit_execution_duration_seconds_...
//	idemkit.record.size         idemkit_record_size_bytes_...
//	idemkit.calls.not_recorded  idemkit_calls_not_recorded_total
//	idemkit.backend.operations  idemkit_backend_operations_total
//	idemkit.backend.duration    idemkit_backend_duration_seconds_...
//
// and attributes become labels (idemkit_operation, idemkit_outcome,
// idemkit_backend_operation, idemkit_backend_result, error_type). For
// example, the replay ratio of one route:
//
//	sum(rate(idemkit_call_duration_seconds_count{idemkit_operation="POST /orders",idemkit_outcome="replayed"}[5m]))
//	  / sum(rate(idemkit_call_duration_seconds_count{idemkit_operation="POST /orders"}[5m]))
//
// and the backend's round trips per call:
//
//	sum(rate(idemkit_backend_operations_total[5m])) / sum(rate(idemkit_call_duration_seconds_count[5m]))
package idemkitotel
