// Command grpc serves grpc.testing.TestService with idemkit's gRPC
// interceptor in front of it:
//
//	go run ./grpc -addr 127.0.0.1:9090              # memory backend
//
//	UnaryCall   guarded, idempotency-key metadata required. Each execution
//	            counts and answers a SimpleResponse whose payload has
//	            response_size bytes and whose server_id is the execution's
//	            number; a non-zero response_status makes it answer that
//	            status code and message instead (still counting the
//	            execution); metadata x-sleep-ms delays the answer.
//	EmptyCall   not guarded; header metadata x-executions holds the count.
//
// Calls may carry the metadata authorization: Bearer alice-1 (or Bearer
// alice-2, Alice after a token refresh) or Bearer bob-1; other credentials
// are refused with Unauthenticated, and a call without any is the
// anonymous caller. Idempotency keys are scoped by caller (see
// demo.Principal): Bob's call with Alice's key runs as his own, never
// answered with hers.
//
// The health service (grpc.health.v1) and server reflection are
// registered, so grpcurl and grpc-health-probe work:
//
//	grpcurl -plaintext -H 'idempotency-key: order-1' -d '{"response_size": 4}' \
//	    127.0.0.1:9090 grpc.testing.TestService/UnaryCall
//
// The backend flags (-store memory|redis|redis-cluster|postgres|firestore
// and their addresses) are the same as the other demos'. It logs with slog and shuts
// down gracefully on SIGINT and SIGTERM.
//
// With -metrics, the guard's metrics (see package idemkitotel) are served
// in the Prometheus text format at GET /metrics on the demo's own port:
//
//	go run ./grpc -metrics
//	curl http://127.0.0.1:9090/metrics
//
// One listener serves both: a connection that opens with the HTTP/2
// preface, as every plaintext gRPC client's does, goes to the gRPC server,
// any other (an HTTP/1.1 request, as Prometheus and curl send) to a small
// HTTP server that answers /metrics only. The gRPC server keeps its own
// transport; an HTTP/2 client without TLS (prior knowledge) would reach
// the gRPC server, not /metrics.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/grpcinterceptor"
)

// maxPayload bounds response_size.
const maxPayload = 4 << 20

func main() { cli.Main(program()) }

// program is the gRPC demo.
func program() cli.Program {
	return cli.Program{Name: "grpc", Addr: "127.0.0.1:9090", Build: build}
}

// service is the demo's TestService: UnaryCall is the business call,
// EmptyCall reports the count of its executions.
type service struct {
	testgrpc.UnimplementedTestServiceServer
	executions atomic.Int64
}

// UnaryCall counts the execution, waits x-sleep-ms (until the call's ctx
// ends), and answers the requested status or payload.
func (s *service) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := s.executions.Add(1)
	if v := metadata.ValueFromIncomingContext(ctx, "x-sleep-ms"); len(v) == 1 {
		if ms, err := strconv.Atoi(v[0]); err == nil && ms > 0 {
			t := time.NewTimer(min(time.Duration(ms)*time.Millisecond, time.Minute))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
	if rs := req.GetResponseStatus(); rs.GetCode() != 0 {
		return nil, status.Error(codes.Code(rs.GetCode()), rs.GetMessage())
	}
	size := req.GetResponseSize()
	if size < 0 || size > maxPayload {
		return nil, status.Errorf(codes.InvalidArgument, "response_size must be 0 to %d", maxPayload)
	}
	return &testgrpc.SimpleResponse{
		ServerId: strconv.FormatInt(n, 10),
		Payload:  &testgrpc.Payload{Body: make([]byte, size)},
	}, nil
}

// EmptyCall answers the execution count in the header metadata
// x-executions.
func (s *service) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-executions", strconv.FormatInt(s.executions.Load(), 10))); err != nil {
		return nil, err
	}
	return &testgrpc.Empty{}, nil
}

// build builds the gRPC server: TestService behind the interceptor (on
// UnaryCall), the health service and server reflection; and, with
// metrics, the HTTP server of GET /metrics on the same listener.
func build(d cli.Deps) (cli.Server, func() int64, error) {
	guard, logger, metrics := d.Guard, d.Logger, d.Metrics
	idem, err := grpcinterceptor.New(guard,
		grpcinterceptor.WithKeyRequired(true), // as POST /orders in the HTTP demos (default: served unguarded)
		grpcinterceptor.WithSelector(grpcinterceptor.SelectMethods(testgrpc.TestService_UnaryCall_FullMethodName)),
		grpcinterceptor.WithScope(principal),
		grpcinterceptor.WithLogger(logger))
	if err != nil {
		return nil, nil, err
	}
	svc := &service{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, idem))
	testgrpc.RegisterTestServiceServer(srv, svc)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	healthSrv.SetServingStatus(testgrpc.TestService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(srv)
	out := server{Server: srv, health: healthSrv}
	if metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics)
		out.metrics = demo.HTTPServer(mux)
	}
	return out, svc.executions.Load, nil
}

// authorization returns the call's single authorization metadata value
// ("" when it has none), and whether it has at most one.
func authorization(ctx context.Context) (string, bool) {
	v := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(v) == 0 {
		return "", true
	}
	return v[0], len(v) == 1
}

// authenticate refuses a call with unknown credentials (see
// demo.Principal), or with several, before the guard sees it.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	token, single := authorization(ctx)
	if _, ok := demo.Principal(token); !ok || !single {
		return nil, status.Error(codes.Unauthenticated, "unknown credentials")
	}
	return handler(ctx, req)
}

// principal is the idempotency scope of a call: its caller, whom
// authenticate has let through.
func principal(ctx context.Context) string {
	token, _ := authorization(ctx)
	p, _ := demo.Principal(token)
	return p
}

// server is the gRPC server with its health service and, with -metrics,
// the HTTP server of /metrics, as a [cli.Server].
type server struct {
	*grpc.Server
	health  *health.Server
	metrics *http.Server // nil without -metrics
}

var _ cli.Server = server{}

// Serve serves ln: gRPC, and with -metrics HTTP/1.1 requests for /metrics
// on the same listener (see split).
func (s server) Serve(ln net.Listener) error {
	if s.metrics == nil {
		return s.Server.Serve(ln)
	}
	grpcLn, httpLn := split(ln)
	served := make(chan error, 1)
	go func() { served <- s.metrics.Serve(httpLn) }()
	err := s.Server.Serve(grpcLn)
	if herr := <-served; err == nil && !errors.Is(herr, http.ErrServerClosed) {
		err = herr
	}
	return err
}

// Shutdown reports NOT_SERVING (load balancers stop sending new calls) and
// waits for the calls in flight until ctx ends; then it cuts them. The
// metrics are served until the calls are over.
func (s server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-ctx.Done():
		s.Stop()
		<-stopped
		err = fmt.Errorf("calls still running after %v were cut", cli.ShutdownTimeout)
	}
	if s.metrics != nil {
		if merr := s.metrics.Shutdown(ctx); merr != nil && err == nil {
			err = merr
		}
	}
	return err
}
