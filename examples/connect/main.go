// Command connect serves grpc.testing.TestService as Connect handlers with
// idemkit's Connect interceptor in front of it, on one port for the
// Connect, gRPC (HTTP/2 without TLS) and gRPC-Web protocols:
//
//	go run ./connect -addr 127.0.0.1:9090           # memory backend
//
//	UnaryCall   guarded, Idempotency-Key header (idempotency-key metadata)
//	            required. Each execution counts and answers a
//	            SimpleResponse whose payload has response_size bytes and
//	            whose server_id is the execution's number; a non-zero
//	            response_status makes it answer that code and message
//	            instead (still counting the execution); the header
//	            X-Sleep-Ms delays the answer.
//	EmptyCall   not guarded; the response header X-Executions holds the
//	            count.
//
// The health service (grpc.health.v1; the demo's TestService and the
// server as a whole SERVING until shutdown begins) and server reflection
// (v1 and v1alpha) are registered, so grpcurl and grpc-health-probe work
// over gRPC, and the health check over Connect and gRPC-Web too.
//
// Calls may carry Authorization: Bearer alice-1 (or Bearer alice-2, Alice
// after a token refresh) or Bearer bob-1; other credentials are refused
// with Unauthenticated, and a call without any is the anonymous caller.
// Idempotency keys are scoped by caller (see demo.Principal): Bob's call
// with Alice's key runs as his own, never answered with hers.
//
//	curl -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' \
//	    -d '{"responseSize": 4}' http://127.0.0.1:9090/grpc.testing.TestService/UnaryCall
//
// The backend flags (-store memory|redis|redis-cluster|postgres|firestore
// and their addresses) are the same as the other demos'. It logs with slog
// and shuts down gracefully on SIGINT and SIGTERM. With -metrics, GET
// /metrics serves the guard's metrics (see package idemkitotel) in the
// Prometheus text format on the same port.
package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
)

// maxPayload bounds response_size.
const maxPayload = 4 << 20

// The procedures, as protoc-gen-connect-go names them.
const (
	testService        = "grpc.testing.TestService"
	unaryCallProcedure = "/" + testService + "/UnaryCall"
	emptyCallProcedure = "/" + testService + "/EmptyCall"
)

func main() { cli.Main(program()) }

// program is the Connect demo.
func program() cli.Program {
	return cli.Program{Name: "connect", Addr: "127.0.0.1:9090", Build: build}
}

// service is the demo's TestService: UnaryCall is the business call,
// EmptyCall reports the count of its executions.
type service struct {
	executions atomic.Int64
}

// unaryCall counts the execution, waits X-Sleep-Ms (until the call's ctx
// ends), and answers the requested status or payload.
func (s *service) unaryCall(ctx context.Context, req *connect.Request[testgrpc.SimpleRequest]) (*connect.Response[testgrpc.SimpleResponse], error) {
	n := s.executions.Add(1)
	if ms, err := strconv.Atoi(req.Header().Get("X-Sleep-Ms")); err == nil && ms > 0 {
		t := time.NewTimer(min(time.Duration(ms)*time.Millisecond, time.Minute))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if rs := req.Msg.GetResponseStatus(); rs.GetCode() != 0 {
		return nil, connect.NewError(connect.Code(rs.GetCode()), errors.New(rs.GetMessage()))
	}
	size := req.Msg.GetResponseSize()
	if size < 0 || size > maxPayload {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("response_size must be 0 to "+strconv.Itoa(maxPayload)))
	}
	return connect.NewResponse(&testgrpc.SimpleResponse{
		ServerId: strconv.FormatInt(n, 10),
		Payload:  &testgrpc.Payload{Body: make([]byte, size)},
	}), nil
}

// emptyCall answers the execution count in the response header
// X-Executions.
func (s *service) emptyCall(context.Context, *connect.Request[testgrpc.Empty]) (*connect.Response[testgrpc.Empty], error) {
	res := connect.NewResponse(&testgrpc.Empty{})
	res.Header().Set("X-Executions", strconv.FormatInt(s.executions.Load(), 10))
	return res, nil
}

// build builds the server: TestService's two procedures behind the
// authentication and (UnaryCall) the interceptor, the health service and
// server reflection, and with metrics GET /metrics, on one http.Server
// that speaks HTTP/1.1 and HTTP/2 without TLS.
func build(d cli.Deps) (cli.Server, func() int64, error) {
	guard, logger, metrics := d.Guard, d.Logger, d.Metrics
	idem, err := connectinterceptor.New(guard,
		connectinterceptor.WithKeyRequired(true), // as POST /orders in the HTTP demos (default: served unguarded)
		connectinterceptor.WithScope(principal),
		connectinterceptor.WithLogger(logger))
	if err != nil {
		return nil, nil, err
	}
	svc := &service{}
	mux := http.NewServeMux()
	mux.Handle(unaryCallProcedure, connect.NewUnaryHandler(unaryCallProcedure, svc.unaryCall, connect.WithInterceptors(authenticate, idem)))
	mux.Handle(emptyCallProcedure, connect.NewUnaryHandler(emptyCallProcedure, svc.emptyCall, connect.WithInterceptors(authenticate)))
	health := grpchealth.NewStaticChecker(testService)
	mux.Handle(grpchealth.NewHandler(health))
	reflector := grpcreflect.NewStaticReflector(testService)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	srv := demo.HTTPServer(mux)
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return server{Server: srv, health: health}, svc.executions.Load, nil
}

// server is the HTTP server with its health service, as a [cli.Server].
type server struct {
	*http.Server
	health *grpchealth.StaticChecker
}

// Shutdown reports NOT_SERVING (load balancers stop sending new calls),
// then shuts the server down gracefully.
func (s server) Shutdown(ctx context.Context) error {
	s.health.SetStatus("", grpchealth.StatusNotServing)
	s.health.SetStatus(testService, grpchealth.StatusNotServing)
	return s.Server.Shutdown(ctx)
}

// authorization returns the call's single Authorization value ("" when it
// has none), and whether it has at most one.
func authorization(h http.Header) (string, bool) {
	v := h.Values("Authorization")
	if len(v) == 0 {
		return "", true
	}
	return v[0], len(v) == 1
}

// authenticate refuses a call with unknown credentials (see
// demo.Principal), or with several, before the guard sees it.
var authenticate = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		token, single := authorization(req.Header())
		if _, ok := demo.Principal(token); !ok || !single {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown credentials"))
		}
		return next(ctx, req)
	}
})

// principal is the idempotency scope of a call: its caller, whom
// authenticate has let through.
func principal(_ context.Context, req connect.AnyRequest) string {
	token, _ := authorization(req.Header())
	p, _ := demo.Principal(token)
	return p
}
