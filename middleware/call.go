package middleware

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
)

// Scope puts the call's key in the namespace of a tenant or principal:
// the record key is "<namespace>:<scope>:<key>" (the scope with '%' and
// ':' percent-encoded, so no two (scope, key) pairs share a record). The
// same key under two scopes names two calls. The work reads it back with
// [CallInfoFrom]; hooks get it hashed. Default: the empty scope.
func Scope(scope string) CallOption { return CallOption{set: setScope, text: scope} }

func setScope(c *callConfig, o CallOption) { c.scope = o.text }

// Operation names what the call does, for hooks, telemetry and the work
// ([CallInfoFrom]): a route pattern ("POST /orders"), gin's FullPath(),
// echo's Path(), a gRPC full method, a queue's name. It must have few
// distinct values (it becomes a metric attribute): never a raw path with
// ids in it. It is not part of the record key nor of the fingerprint.
// Default: "".
func Operation(name string) CallOption { return CallOption{set: setOperation, text: name} }

func setOperation(c *callConfig, o CallOption) { c.operation = o.text }

// RecordTTL overrides the guard's record TTL for this call's outcome (see
// [WithRecordTTL]); it must be at least 1 ms.
func RecordTTL(d time.Duration) CallOption { return CallOption{set: setRecordTTL, d: d} }

func setRecordTTL(c *callConfig, o CallOption) { c.recordTTL, c.recordTTLSet = o.d, true }

// FailOpen lets the call run fn unguarded when the backend cannot be
// reached for its claim (idemkit.Code.Transient: unreachable, timed out,
// refusing for load): nothing is claimed nor recorded, a duplicate may
// run too, and the outcome is [EventFailedOpen]. Other failures, and a
// record that exists but cannot be read (store.ErrUnsealable: its request
// ran), still give [ErrUnavailable]. Default: fail closed.
func FailOpen() CallOption { return CallOption{set: setFailOpen} }

func setFailOpen(c *callConfig, _ CallOption) { c.failOpen = true }

// escapeScope percent-encodes '%' and ':' in a scope.
func escapeScope(s string) string {
	if !strings.ContainsAny(s, "%:") {
		return s
	}
	return scopeEscaper.Replace(s)
}

var scopeEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// CallInfo is what the work of a guarded call can read from its ctx (see
// [CallInfoFrom]).
type CallInfo struct {
	Operation string        // see [Operation]
	Scope     string        // see [Scope]
	Key       string        // the idempotency key, as the caller gave it
	Fence     idemkit.Fence // the fence of the claim the work runs under: pass it to fenced writes, or derive downstream keys from it; zero when the call failed open (see FailOpen), which has no claim
}

// callKey keys the running call in fn's ctx.
type callKey struct{}

// CallInfoFrom returns the key, scope, operation and fence of the guarded
// call whose work ctx belongs to (fn's ctx, or one derived from it), and
// false outside one. A fence orders the claims of one key: a later claim
// always has a greater fence, so a downstream system that keeps the
// greatest fence it saw can refuse the writes of a holder whose claim was
// taken over.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok {
		return CallInfo{}, false
	}
	return CallInfo{Operation: c.operation, Scope: c.scope, Key: c.key, Fence: c.fence}, true
}

// DoNotRecord asks the guard not to record the outcome of the call whose
// work ctx belongs to: once fn returns, the claim is released and nothing
// is stored, so a retry runs the work again (as the Forget verdict does).
// It is for responses that must not stick, such as a wrong one-time
// password. It reports false outside a guarded call.
func DoNotRecord(ctx context.Context) bool {
	c, ok := ctx.Value(callKey{}).(*call)
	if ok {
		c.noRecord.Store(true)
	}
	return ok
}

// TransactionBegun reports whether the work of the guarded call that ctx
// belongs to (fn's ctx, or one derived from it) has begun a transaction
// that commits with its outcome (pgstore.Tx), and, in can, whether it can
// begin one: can is false outside a guarded call and on a store that gives
// the call no such transaction (see store.Transactor).
//
// It is for adapters that send part of their answer while the work runs
// (an HTTP status and headers, gRPC metadata): what the work gives them
// once begun is true is held until [Guard.Execute] returns, and sent only
// if it returns no error, the commit having landed. An error means the
// work's writes were rolled back: nothing held may reach the client.
func TransactionBegun(ctx context.Context) (begun, can bool) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok || c.work == nil {
		return false, false
	}
	return c.work.Begun(), true
}

// OutcomeWatch receives the outcome of the guarded calls made with a
// context from [WatchOutcome].
type OutcomeWatch struct {
	last atomic.Pointer[Event]
}

type watchKey struct{}

// WatchOutcome returns a copy of ctx that makes the outcome of a guarded
// call made with it (or a context derived from it) readable afterwards,
// by code that runs outside the guard: an access log or a metrics
// middleware in front of the idempotency middleware (HTTP), an outer
// interceptor (gRPC). Adapters report requests they let through or
// refused too (see [Guard.Bypass]), so every request that reaches them has
// an outcome.
//
//	ctx, watch := middleware.WatchOutcome(r.Context())
//	next.ServeHTTP(w, r.WithContext(ctx))
//	if e, ok := watch.Outcome(); ok {
//		slog.InfoContext(ctx, "request", "idempotency", e.Kind.String())
//	}
func WatchOutcome(ctx context.Context) (context.Context, *OutcomeWatch) {
	w := new(OutcomeWatch)
	return context.WithValue(ctx, watchKey{}, w), w
}

// Outcome returns the outcome of the last guarded call made with the
// watched context, and false if none was made (yet).
func (w *OutcomeWatch) Outcome() (Event, bool) {
	if e := w.last.Load(); e != nil {
		return *e, true
	}
	return Event{}, false
}

// Bypass reports a request that an adapter did not hand to the guard, so
// that hooks and outcome watchers see every request: kind is
// [EventPassedThrough] (a method that is not guarded, a request without a
// key when none is required) or [EventRejected] (a missing or malformed
// key, an unusable body; err says why). Only [Operation] and [Scope] of
// opts are used. Other kinds are ignored. Adapters call it; it costs
// nothing without a hook or a watch.
func (g *Guard) Bypass(ctx context.Context, kind EventKind, err error, opts ...CallOption) {
	if kind != EventPassedThrough && kind != EventRejected {
		return
	}
	w, _ := ctx.Value(watchKey{}).(*OutcomeWatch)
	if len(g.cfg.hooks) == 0 && w == nil {
		return
	}
	var cc callConfig
	for _, o := range opts {
		if o.set != nil {
			o.set(&cc, o)
		}
	}
	e := Event{Kind: kind, Operation: cc.operation, Err: err}
	if cc.scope != "" {
		e.ScopeHash = g.cfg.hasher.Hash(cc.scope)
	}
	g.outcome(ctx, w, e)
}

// outcome hands the outcome e of a call made with ctx to w (the ctx's
// watch, if any) and to the hooks.
func (g *Guard) outcome(ctx context.Context, w *OutcomeWatch, e Event) {
	if w != nil {
		w.last.Store(&e)
	}
	for _, h := range g.cfg.hooks {
		emitTo(h, ctx, e)
	}
}

// emitTo hands e to h, recovering a panic.
func emitTo(h Hook, ctx context.Context, e Event) {
	defer func() { _ = recover() }()
	h.IdempotencyEvent(ctx, e)
}

// startTo calls h's start, recovering a panic (the call then goes on with
// ctx).
func startTo(h Hook, ctx context.Context, e Event) (out context.Context) {
	out = ctx
	defer func() { _ = recover() }()
	if c := h.IdempotencyStart(ctx, e); c != nil {
		out = c
	}
	return out
}
