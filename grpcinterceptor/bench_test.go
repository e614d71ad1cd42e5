package grpcinterceptor_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// The benchmarks send a small UnaryCall over a real loopback connection to
// a bare TestService and to the same service behind the server interceptor
// (the memory backend): a first execution (a new key each time) and a replay
// (one key). The difference is the interceptor's overhead per call.

type benchService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (benchService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-order", "42"))
	return &testgrpc.SimpleResponse{ServerId: "order-42", Payload: &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

var benchRequest = &testgrpc.SimpleRequest{ResponseSize: 64, Payload: &testgrpc.Payload{Body: []byte(`{"customer":"cus_42","amount":1250}`)}}

func benchClient(b *testing.B, guarded bool) testgrpc.TestServiceClient {
	b.Helper()
	var opts []grpc.ServerOption
	if guarded {
		g, err := middleware.New(memstore.New(), middleware.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		idem, err := grpcinterceptor.New(g, grpcinterceptor.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(idem))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, benchService{})
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	return dial(b, ln.Addr().String())
}

func BenchmarkBareUnaryCall(b *testing.B) {
	c := benchClient(b, false)
	ctx := withKey(context.Background(), "8e03978e-40d5-43e8-bc93-6894a57f9324")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.UnaryCall(ctx, benchRequest); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFirstExecution(b *testing.B) {
	c := benchClient(b, true)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		ctx := withKey(context.Background(), "8e03978e-40d5-43e8-bc93-"+strconv.Itoa(100000000000+i))
		if _, err := c.UnaryCall(ctx, benchRequest); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReplay(b *testing.B) {
	c := benchClient(b, true)
	ctx := withKey(context.Background(), "8e03978e-40d5-43e8-bc93-6894a57f9324")
	if _, err := c.UnaryCall(ctx, benchRequest); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.UnaryCall(ctx, benchRequest); err != nil {
			b.Fatal(err)
		}
	}
}

// The Intercept benchmarks call the interceptor in process, without the
// transport, so its own cost is not lost in the loopback round trip.

// nopStream stands for the transport stream: it accepts metadata and
// sends nothing.
type nopStream struct{}

func (nopStream) Method() string                  { return unaryCall }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }

func benchIntercept(b *testing.B, key func(i int) string) {
	g, err := middleware.New(memstore.New(), middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	idem, err := grpcinterceptor.New(g, grpcinterceptor.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryCall}
	handler := func(ctx context.Context, req any) (any, error) {
		return benchService{}.UnaryCall(ctx, req.(*testgrpc.SimpleRequest))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{keyMD: {key(i)}})
		ctx = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
		if _, err := idem(ctx, benchRequest, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInterceptFirstExecution(b *testing.B) {
	benchIntercept(b, func(i int) string { return "8e03978e-40d5-43e8-bc93-" + strconv.Itoa(100000000000+i) })
}

func BenchmarkInterceptReplay(b *testing.B) {
	benchIntercept(b, func(int) string { return "8e03978e-40d5-43e8-bc93-6894a57f9324" })
}
