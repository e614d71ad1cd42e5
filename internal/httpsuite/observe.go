package httpsuite

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// requestIDKey keys the request id that the observer's middleware puts in
// a request's context.
type requestIDKey struct{}

// startedKey keys what the observer's IdempotencyStart adds to a call's
// context (the app reports whether its context has it).
type startedKey struct{}

// observer watches requests from both sides. Its middleware, in front of
// a stack, puts the request id the client sent (X-Request-Id) in the
// request's context and watches the request's outcome
// (middleware.WatchOutcome), as an access log does; as the guard's hook
// (middleware.Hook), it records every event under the request id it finds
// in the event's context.
type observer struct {
	mu      sync.Mutex
	events  map[string][]middleware.Event // by request id
	watched map[string]*middleware.Event  // by request id; nil: the watch saw no outcome
}

func newObserver() *observer {
	return &observer{events: map[string][]middleware.Event{}, watched: map[string]*middleware.Event{}}
}

// IdempotencyStart implements middleware.Hook: it records the start and
// marks the call's context.
func (o *observer) IdempotencyStart(ctx context.Context, e middleware.Event) context.Context {
	o.record(ctx, e)
	return context.WithValue(ctx, startedKey{}, true)
}

// IdempotencyEvent implements middleware.Hook.
func (o *observer) IdempotencyEvent(ctx context.Context, e middleware.Event) { o.record(ctx, e) }

func (o *observer) record(ctx context.Context, e middleware.Event) {
	id, _ := ctx.Value(requestIDKey{}).(string)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events[id] = append(o.events[id], e)
}

// front is the observer's middleware.
func (o *observer) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		ctx, outcome := middleware.WatchOutcome(context.WithValue(r.Context(), requestIDKey{}, id))
		next.ServeHTTP(w, r.WithContext(ctx))
		var seen *middleware.Event
		if e, ok := outcome(); ok {
			seen = &e
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.watched[id] = seen
	})
}

// send sends r to srv with the request id id.
func (o *observer) send(t *testing.T, srv *server, id string, r request) response {
	t.Helper()
	h := map[string]string{"X-Request-Id": id}
	for k, v := range r.header {
		h[k] = v
	}
	r.header = h
	return srv.do(t, r)
}

// seen returns the events recorded for id so far.
func (o *observer) seen(id string) []middleware.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]middleware.Event(nil), o.events[id]...)
}

// want waits for the outcome of the request id, and checks it: the hook
// saw exactly one outcome, last, of kind with the operation op, after a
// start with the same operation and key when the guard ran the call (not
// for requests the adapter passed through or refused), and the watch in
// front saw the same outcome. It returns the outcome.
func (o *observer) want(t *testing.T, id string, kind middleware.EventKind, op string) middleware.Event {
	t.Helper()
	var events []middleware.Event
	var watched *middleware.Event
	for deadline := time.Now().Add(10 * time.Second); ; {
		o.mu.Lock()
		events = append(events[:0], o.events[id]...)
		w, done := o.watched[id]
		o.mu.Unlock()
		if done && len(events) > 0 && events[len(events)-1].Kind.Outcome() {
			watched = w
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s: no outcome; the hook saw %s", id, kinds(events))
		}
		time.Sleep(time.Millisecond)
	}
	outcomes := 0
	for _, e := range events {
		if e.Kind.Outcome() {
			outcomes++
		}
	}
	e := events[len(events)-1]
	if outcomes != 1 || e.Kind != kind || e.Operation != op {
		t.Fatalf("request %s: the hook saw %s, the outcome with operation %q; want one outcome, %s, with operation %q", id, kinds(events), e.Operation, kind, op)
	}
	guarded := kind != middleware.EventPassedThrough && kind != middleware.EventRejected
	if started := events[0].Kind == middleware.EventStart; started != guarded {
		t.Fatalf("request %s: the hook saw %s; want a start first exactly when the guard ran the call", id, kinds(events))
	}
	if guarded && (events[0].Operation != op || events[0].KeyHash == "" || events[0].KeyHash != e.KeyHash) {
		t.Fatalf("request %s: start %+v and outcome %+v disagree", id, events[0], e)
	}
	if watched == nil || watched.Kind != kind || watched.Operation != op {
		t.Fatalf("request %s: the middleware in front watched %+v; want %s with operation %q", id, watched, kind, op)
	}
	return e
}

// kinds lists the kinds of events, for messages.
func kinds(events []middleware.Event) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range events {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Kind.String())
	}
	b.WriteByte(']')
	return b.String()
}

// newGuard returns a guard on b with opts; it fails t if they are invalid.
func newGuard(t *testing.T, b Backends, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(b.Store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// observed builds a stack on fresh backends whose guard has the observer
// o as its hook (with gopts), behind o's middleware.
func (s *suite) observed(t *testing.T, o *observer, gopts []middleware.Option, opts ...nethttp.Option) *server {
	t.Helper()
	b := s.backends(t)
	g := newGuard(t, b, append([]middleware.Option{middleware.WithHook(o)}, gopts...)...)
	return s.serveGuard(t, g, b, &app{}, o.front, opts...)
}

// RouteStack builds a framework's handler (a ServeMux, a gin engine, an
// echo instance) that serves h at POST /orders/<id>, a route with a path
// parameter in the framework's syntax, behind the adapter's middleware
// built on guard with opts.
type RouteStack func(t *testing.T, guard *middleware.Guard, opts []nethttp.Option, h http.Handler) http.Handler

// CheckOperations checks the operation of requests to a route with a path
// parameter. want is the adapter's default for the route of stack, the
// method and the route's pattern ("POST /orders/:id"). Hooks, a middleware
// in front that watches outcomes, and the handler (through
// middleware.CallInfoFrom) all see want, whatever the id in the path, for
// an execution, a replay, a request without a key (passed through) and
// one with a malformed key (rejected); with nethttp.WithOperation among
// the options, the name it gives instead.
func CheckOperations(t *testing.T, stack RouteStack, want string) {
	t.Helper()
	for _, c := range []struct {
		opts []nethttp.Option
		want string
	}{
		{nil, want},
		{[]nethttp.Option{nethttp.WithOperation(func(r *http.Request) string { return "create-order " + r.Method })}, "create-order POST"},
	} {
		o := newObserver()
		g := NewGuard(t, middleware.WithHook(o))
		var seen sync.Map // request id → the operation the handler read
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, _ := middleware.CallInfoFrom(r.Context())
			seen.Store(r.Header.Get("X-Request-Id"), info.Operation)
			w.WriteHeader(http.StatusCreated)
		})
		client := &http.Client{Transport: &http.Transport{}}
		t.Cleanup(client.CloseIdleConnections)
		srv := &server{url: Serve(t, o.front(stack(t, g, c.opts, h))), client: client}
		for _, r := range []struct {
			id   string
			path string
			key  string
			kind middleware.EventKind
		}{
			{"executed", "/orders/7", "k", middleware.EventExecuted},
			{"replayed", "/orders/7", "k", middleware.EventReplayed},
			{"other-id", "/orders/8", "k8", middleware.EventExecuted},
			{"no-key", "/orders/9", "", middleware.EventPassedThrough},
			{"malformed", "/orders/9", `"a", "b"`, middleware.EventRejected},
		} {
			req := request{path: r.path, body: "{}"}
			if r.key != "" {
				req.key = []string{r.key}
			}
			o.send(t, srv, r.id, req)
			o.want(t, r.id, r.kind, c.want)
			if r.kind == middleware.EventExecuted {
				if op, _ := seen.Load(r.id); op != c.want {
					t.Fatalf("%s: the handler read the operation %q; want %q", r.id, op, c.want)
				}
			}
		}
	}
}
