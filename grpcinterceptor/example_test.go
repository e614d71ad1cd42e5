package grpcinterceptor_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// orders is a TestService whose UnaryCall counts its executions, and whose
// EmptyCall does nothing.
type orders struct {
	testgrpc.UnimplementedTestServiceServer
	n atomic.Int64
}

func (o *orders) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: fmt.Sprint("order ", o.n.Add(1))}, nil
}

func (o *orders) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// The server interceptor in front of a service, requiring keys, and the
// client interceptor giving each call a key: the same call sent twice with
// one key runs once.
func Example() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := grpcinterceptor.New(guard,
		grpcinterceptor.WithKeyRequired(true), // a call without a key is refused (default: served unguarded)
		grpcinterceptor.WithExclude("/grpc.testing.TestService/EmptyCall"))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
	svc := &orders{}
	testgrpc.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	keys, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithMaxAttempts(4))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(keys))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	// Two attempts of one logical call carry the same key (the client
	// interceptor keeps a key the caller set): the second is a replay.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "order-42")
	for range 2 {
		var header metadata.MD
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 3}, grpc.Header(&header))
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.GetServerId(), "replayed:", grpcinterceptor.Replayed(header))
	}
	// Without a key of its own, each call gets a fresh one.
	if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
		panic(err)
	}
	fmt.Println("executions:", svc.n.Load())
	// Output:
	// order 1 replayed: false
	// order 1 replayed: true
	// executions: 2
}

// Options of the server interceptor: a principal from the metadata, a
// method left unguarded, and every outcome recorded.
func ExampleNew() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	tenant := func(ctx context.Context) string {
		if v := metadata.ValueFromIncomingContext(ctx, "x-tenant"); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	idem, err := grpcinterceptor.New(guard,
		grpcinterceptor.WithScope(tenant),
		grpcinterceptor.WithExclude("/grpc.testing.TestService/EmptyCall"),
		grpcinterceptor.WithStorePolicy(grpcinterceptor.StorePolicy{Panic: true}))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
	defer srv.Stop()
	testgrpc.RegisterTestServiceServer(srv, &orders{})

	// An invalid option is an error at construction, never a panic on a
	// call.
	_, err = grpcinterceptor.New(guard, grpcinterceptor.WithMetadataKey("grpc-key"))
	fmt.Println(err != nil)
	// Output: true
}

// The client interceptor retrying on its own, with a grpc-go retry policy
// as the alternative: either way every attempt carries the call's key.
func ExampleNewClientInterceptor() {
	keys, err := grpcinterceptor.NewClientInterceptor(
		grpcinterceptor.WithMaxAttempts(4),
		grpcinterceptor.WithBackoff(idemkit.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:9090",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(keys))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	_, err = testgrpc.NewTestServiceClient(conn).UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	fmt.Println(err)
}

// An interceptor listed before the idempotency interceptor (an access log,
// a metrics interceptor) reads each call's outcome: it watches the context
// it passes on, and reads the outcome once the call returns. Calls the
// interceptor lets through or refuses have one too.
func ExampleNew_watchOutcome() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := grpcinterceptor.New(guard, grpcinterceptor.WithExclude("/grpc.testing.TestService/EmptyCall"))
	if err != nil {
		panic(err)
	}
	accessLog := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, outcome := middleware.WatchOutcome(ctx)
		resp, err := handler(ctx, req)
		if e, ok := outcome(); ok {
			fmt.Println(e.Operation, e.Kind, status.Code(err))
		}
		return resp, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(accessLog, idem))
	testgrpc.RegisterTestServiceServer(srv, &orders{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "order-7")
	_, _ = client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1})
	_, _ = client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1})
	_, _ = client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 2})
	_, _ = client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}) // no key: served unguarded
	_, _ = client.EmptyCall(context.Background(), &testgrpc.Empty{})
	// Output:
	// /grpc.testing.TestService/UnaryCall executed OK
	// /grpc.testing.TestService/UnaryCall replayed OK
	// /grpc.testing.TestService/UnaryCall mismatch FailedPrecondition
	// /grpc.testing.TestService/UnaryCall passed-through OK
	// /grpc.testing.TestService/EmptyCall passed-through OK
}

// The key in a field of the request, as APIs that declare a request_id
// field carry it: the server reads it there (before the metadata), and the
// client fills an empty one with a fresh key, in the caller's message, so
// that every retry, and every resend of the same message, carries it. One
// option list serves both ends.
func ExampleWithKeyField() {
	shared := []grpcinterceptor.Option{grpcinterceptor.WithKeyField("request_id")}

	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := grpcinterceptor.New(guard, shared...)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
	defer srv.Stop()

	keys, err := grpcinterceptor.NewClientInterceptor(append(shared, grpcinterceptor.WithMaxAttempts(4))...)
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:9090",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(keys))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
}
