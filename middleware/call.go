package middleware

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
)

// Scope puts the call's key in the namespace of a tenant or principal: the
// record key is "<namespace>:<scope>:<key>" (the scope with '%' and ':'
// percent-encoded). Default: the empty scope.
func Scope(scope string) CallOption { return CallOption{set: setScope, text: scope} }

func setScope(c *callConfig, o CallOption) { c.scope = o.text }

// Operation names what the call does, for hooks, telemetry and the work: a
// route pattern ("POST /orders"), a gRPC full method, a queue's name. It
// becomes a metric attribute, so it must have few distinct values. It is
// part of neither the record key nor the fingerprint. Default: "".
func Operation(name string) CallOption { return CallOption{set: setOperation, text: name} }

func setOperation(c *callConfig, o CallOption) { c.operation = o.text }

// RecordTTL overrides [WithRecordTTL] for this call; at least 1 ms.
func RecordTTL(d time.Duration) CallOption { return CallOption{set: setRecordTTL, d: d} }

func setRecordTTL(c *callConfig, o CallOption) { c.recordTTL, c.recordTTLSet = o.d, true }

// FailOpen lets the call run fn unguarded, recording nothing, when its
// claim fails transiently (idemkit.Code.Transient); the outcome is
// [EventFailedOpen]. Other failures, and a record that cannot be read
// (store.ErrUnsealable), still give [ErrUnavailable]. Default: fail
// closed.
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
	Fence     idemkit.Fence // the claim's fence, for fenced writes downstream; zero when the call failed open
}

// callKey keys the running call in fn's ctx.
type callKey struct{}

// CallInfoFrom returns the guarded call that fn's ctx (or one derived from
// it) belongs to, and false outside one.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok {
		return CallInfo{}, false
	}
	return CallInfo{Operation: c.operation, Scope: c.scope, Key: c.key, Fence: c.fence}, true
}

// DoNotRecord asks the guard not to record the outcome of the call that
// fn's ctx belongs to: once fn returns, the claim is released and nothing
// is stored, so a retry runs the work again (a wrong one-time password, an
// HTTP 5xx). It reports false outside a guarded call.
func DoNotRecord(ctx context.Context) bool {
	c, ok := ctx.Value(callKey{}).(*call)
	if ok {
		c.noRecord.Store(true)
	}
	return ok
}

// TransactionBegun reports whether the work that fn's ctx belongs to has
// begun a transaction that commits with its outcome (pgstore.Tx), and
// whether it can ([store.Transactor]). An adapter that sends part of its
// answer while the work runs holds what comes after begin until
// [Guard.Execute] returns without error: an error means the work's writes
// were rolled back.
func TransactionBegun(ctx context.Context) (begun, can bool) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok || c.work == nil {
		return false, false
	}
	return c.work.Begun(), true
}

// outcomeWatch receives the outcome of the guarded calls made with a
// context from [WatchOutcome].
type outcomeWatch struct {
	last atomic.Pointer[Event]
}

type watchKey struct{}

// WatchOutcome returns a copy of ctx, and a function that returns the
// outcome of the last guarded call made with it (false if none was made
// yet), for code outside the guard: an access log or metrics middleware in
// front of an adapter. Adapters report requests they pass through or
// refuse too ([Guard.Bypass]).
//
//	ctx, outcome := middleware.WatchOutcome(r.Context())
//	next.ServeHTTP(w, r.WithContext(ctx))
//	if e, ok := outcome(); ok {
//		slog.InfoContext(ctx, "request", "idempotency", e.Kind.String())
//	}
func WatchOutcome(ctx context.Context) (context.Context, func() (Event, bool)) {
	w := new(outcomeWatch)
	return context.WithValue(ctx, watchKey{}, w), w.outcome
}

func (w *outcomeWatch) outcome() (Event, bool) {
	if e := w.last.Load(); e != nil {
		return *e, true
	}
	return Event{}, false
}

// Bypass reports a request an adapter did not hand to the guard, so that
// hooks and outcome watchers see every request: kind is
// [EventPassedThrough] or [EventRejected] (others are ignored); only
// [Operation] and [Scope] of opts are used.
func (g *Guard) Bypass(ctx context.Context, kind EventKind, err error, opts ...CallOption) {
	if kind != EventPassedThrough && kind != EventRejected {
		return
	}
	w, _ := ctx.Value(watchKey{}).(*outcomeWatch)
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
func (g *Guard) outcome(ctx context.Context, w *outcomeWatch, e Event) {
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
