package otelsuite_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/echo5adapter"
	"github.com/idemkit/idemkit/echoadapter"
	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// serverConfig is what a scenario asks of the adapter.
type serverConfig struct {
	failOpen bool // run the handler unguarded when the backend is unreachable
	noWait   bool // answer a duplicate of a running request "in progress" at once
}

// request is one guarded request, in terms every transport can send.
type request struct {
	label string // names the request's server span (see servers)
	key   string // the idempotency key; "" sends none
	body  string
	auth  string // the credentials; "" sends none
	flags string // the business's switches (see parseFlags)
}

// answer is what a request got: the HTTP status or the gRPC code, and
// whether it was a replay.
type answer struct {
	status   int
	replayed bool
}

// client sends requests to an adapter's server.
type client interface {
	call(ctx context.Context, r request) answer
	// passThrough sends a request the adapter does not guard.
	passThrough(ctx context.Context, label string) answer
}

// transport is one adapter, served on a real listener.
type transport struct {
	name          string
	grpc          bool
	operation     string // the guarded route's operation
	passOperation string // the operation of passThrough's request
	start         func(t *testing.T, f *fixture, cfg serverConfig) client
}

const (
	unaryCall = "/grpc.testing.TestService/UnaryCall"
	emptyCall = "/grpc.testing.TestService/EmptyCall"
)

func transports() []transport {
	return []transport{
		{name: "nethttp", operation: "POST /orders", passOperation: "POST /orders", start: startNetHTTP},
		{name: "gin", operation: "POST /orders", passOperation: "POST /orders", start: startGin},
		{name: "echo", operation: "POST /orders", passOperation: "POST /orders", start: startEcho},
		{name: "echo5", operation: "POST /orders/:id", passOperation: "POST /orders/:id", start: startEcho5},
		{name: "grpc", grpc: true, operation: unaryCall, passOperation: emptyCall, start: startGRPC},
		{name: "connect", grpc: true, operation: unaryCall, passOperation: emptyCall, start: startConnect},
	}
}

// httpOptions are the options every HTTP adapter gets.
func httpOptions(cfg serverConfig) []nethttp.Option {
	return []nethttp.Option{
		nethttp.WithMaxResponseBytes(maxResponse), nethttp.WithFailOpen(cfg.failOpen),
		nethttp.WithWaitForResult(!cfg.noWait), nethttp.WithLogger(discard()),
	}
}

// handler is the business behind the HTTP adapters, on POST /orders: 201
// with a JSON body, or 500 with the flag fail.
func (f *fixture) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fl := parseFlags(r.URL.Query().Get("flags"))
		f.biz.work(r.Context(), fl)
		if fl.fail {
			http.Error(w, "failed on purpose", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"pad":"`+strings.Repeat("x", fl.responseSize())+`"}`)
	})
}

// outerHTTP is the server span around an HTTP adapter, as an HTTP
// instrumentation in front of it makes.
func (f *fixture) outerHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, done := f.srv.start(r.Context(), f.tm.tracer(), r.Method+" "+r.URL.Path, r.Header.Get("X-Test-Request"))
		defer done()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func startNetHTTP(t *testing.T, f *fixture, cfg serverConfig) client {
	idem, err := nethttp.New(f.guard, httpOptions(cfg)...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(f.handler()))
	return serveHTTP(t, f.outerHTTP(mux))
}

func startGin(t *testing.T, f *fixture, cfg serverConfig) client {
	idem, err := ginadapter.New(f.guard, httpOptions(cfg)...) // its default operation: "POST /orders"
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.POST("/orders", idem, gin.WrapH(f.handler()))
	return serveHTTP(t, f.outerHTTP(r))
}

func startEcho(t *testing.T, f *fixture, cfg serverConfig) client {
	idem, err := echoadapter.New(f.guard, echoadapter.WithHTTPOptions(httpOptions(cfg)...)) // its default operation: "POST /orders"
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/orders", echo.WrapHandler(f.handler()), idem)
	return serveHTTP(t, f.outerHTTP(e))
}

// startEcho5 serves the handler under the route /orders/:id, so that the
// operation is echo v5's route, not the path the client sends.
func startEcho5(t *testing.T, f *fixture, cfg serverConfig) client {
	idem, err := echo5adapter.New(f.guard, echo5adapter.WithHTTPOptions(httpOptions(cfg)...)) // its default operation: "POST /orders/:id"
	if err != nil {
		t.Fatal(err)
	}
	e := echo5.New()
	e.POST("/orders/:id", echo5.WrapHandler(f.handler()), idem)
	c := serveHTTP(t, f.outerHTTP(e)).(*httpClient)
	c.path = "/orders/1"
	return c
}

// serveHTTP serves h on a loopback listener until the test ends.
func serveHTTP(t *testing.T, h http.Handler) client {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &httpClient{url: srv.URL, path: "/orders", c: srv.Client()}
}

type httpClient struct {
	url  string
	path string // the guarded route's path
	c    *http.Client
}

func (c *httpClient) call(ctx context.Context, r request) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+c.path+"?flags="+r.flags, strings.NewReader(r.body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-Request", r.label)
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	if r.auth != "" {
		req.Header.Set("Authorization", r.auth)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return answer{status: -1}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

func (c *httpClient) passThrough(ctx context.Context, label string) answer {
	return c.call(ctx, request{label: label, body: `{"n":0}`})
}

// grpcService is the business behind the gRPC interceptor: UnaryCall is
// guarded (the flags in the metadata x-flags; Internal with the flag
// fail), EmptyCall is not.
type grpcService struct {
	testgrpc.UnimplementedTestServiceServer
	f *fixture
}

func (s grpcService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	fl := parseFlags(first(metadata.ValueFromIncomingContext(ctx, "x-flags")))
	s.f.biz.work(ctx, fl)
	if fl.fail {
		return nil, status.Error(codes.Internal, "failed on purpose")
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

func (s grpcService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// outerGRPC is the server span around the gRPC interceptor, as a gRPC
// instrumentation in front of it makes.
func (f *fixture) outerGRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, done := f.srv.start(ctx, f.tm.tracer(), info.FullMethod, first(metadata.ValueFromIncomingContext(ctx, "x-test-request")))
	defer done()
	return handler(ctx, req)
}

func startGRPC(t *testing.T, f *fixture, cfg serverConfig) client {
	idem, err := grpcinterceptor.New(f.guard,
		grpcinterceptor.WithSelector(grpcinterceptor.SelectMethods(unaryCall)),
		grpcinterceptor.WithMaxResponseBytes(maxResponse),
		grpcinterceptor.WithFailOpen(cfg.failOpen),
		grpcinterceptor.WithWaitForResult(!cfg.noWait),
		grpcinterceptor.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(f.outerGRPC, idem))
	testgrpc.RegisterTestServiceServer(srv, grpcService{f: f})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return grpcClient{testgrpc.NewTestServiceClient(conn)}
}

type grpcClient struct{ c testgrpc.TestServiceClient }

func (c grpcClient) call(ctx context.Context, r request) answer {
	md := []string{"x-test-request", r.label, "x-flags", r.flags}
	if r.key != "" {
		md = append(md, "idempotency-key", r.key)
	}
	if r.auth != "" {
		md = append(md, "authorization", r.auth)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	var header metadata.MD
	_, err := c.c.UnaryCall(ctx, &testgrpc.SimpleRequest{
		ResponseSize: int32(parseFlags(r.flags).responseSize()),
		Payload:      &testgrpc.Payload{Body: []byte(r.body)},
	}, grpc.Header(&header))
	return answer{status: int(status.Code(err)), replayed: grpcinterceptor.Replayed(header)}
}

func (c grpcClient) passThrough(ctx context.Context, label string) answer {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-test-request", label)
	_, err := c.c.EmptyCall(ctx, &testgrpc.Empty{})
	return answer{status: int(status.Code(err))}
}

// fixture is one scenario's world: the telemetry, a memory backend that
// can be made to fail, a guard with the hook on it (and on its store),
// the business, and an adapter's server with its client.
type fixture struct {
	tr      transport
	tm      *telemetry
	store   *flakyStore
	guard   *middleware.Guard
	biz     *business
	srv     *servers
	waiting chan struct{} // receives when a call starts waiting for a running duplicate
	client  client
}

func setup(t *testing.T, tr transport, cfg serverConfig) *fixture {
	t.Helper()
	tm := newTelemetry(t)
	f := &fixture{tr: tr, tm: tm, store: newFlakyStore(t), srv: newServers(), waiting: make(chan struct{}, 8)}
	signal := middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventWaiting {
			f.waiting <- struct{}{}
		}
	})
	g, err := middleware.New(tm.hook.Store(f.store),
		middleware.WithHook(tm.hook), middleware.WithHook(signal), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	f.guard = g
	f.biz = &business{guard: g, tracer: tm.tracer(), started: make(chan struct{}, 8), release: make(chan struct{})}
	f.client = tr.start(t, f, cfg)
	// Before the server stops (cleanups run last first): a test that
	// failed half-way must not leave blocked work holding it up.
	t.Cleanup(f.biz.unblock)
	return f
}

// call sends r with the test's context.
func (f *fixture) call(t *testing.T, r request) answer { return f.client.call(t.Context(), r) }

// want fails t unless a is the HTTP status httpStatus (HTTP adapters) or
// the gRPC code grpcCode (gRPC), replayed as said.
func (f *fixture) want(t *testing.T, what string, a answer, httpStatus int, grpcCode codes.Code, replayed bool) {
	t.Helper()
	want := httpStatus
	if f.tr.grpc {
		want = int(grpcCode)
	}
	if a.status != want || a.replayed != replayed {
		t.Fatalf("%s: answered %d (replayed %v), want %d (replayed %v)", what, a.status, a.replayed, want, replayed)
	}
}
