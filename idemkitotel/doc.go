// Package idemkitotel reports what the idempotency guard does to
// OpenTelemetry: a span per guarded call, under the request's own span, and
// metrics of every call's outcome and of the backend's operations.
//
//	hook, err := idemkitotel.New() // the global tracer and meter providers
//	...
//	guard, err := middleware.New(hook.Store(backend), middleware.WithHook(hook))
//
// [Hook] is a middleware.Hook; [Hook.Store] wraps the guard's backend to
// count and time its operations. Neither adds a round trip: the hook
// listens to the guard's events, and the decorator wraps the calls the
// guard makes anyway. The work runs under the call's span, so the
// handler's spans are its children. Attributes of metrics have low
// cardinality (never a key nor its hash). The tracer and the meter are
// named "github.com/idemkit/idemkit/idemkitotel".
//
// docs/operations.md lists every span attribute, event, instrument and
// its Prometheus name.
package idemkitotel
