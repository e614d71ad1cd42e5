package grpcinterceptor_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// lookups answers UnaryCall with a response, unless the request asks for
// no payload: then with NotFound.
type lookups struct {
	testgrpc.UnimplementedTestServiceServer
}

func (lookups) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if req.GetResponseSize() == 0 {
		return nil, status.Error(codes.NotFound, "no such order")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("order-id", "42"))
	return &testgrpc.SimpleResponse{ServerId: "order 42"}, nil
}

// An operator's tool shows recorded calls: the guard's Inspect reads the
// record, DecodeRecorded turns its response into the call's status, or
// its response message and metadata.
func ExampleDecodeRecorded() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := grpcinterceptor.New(guard)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
	testgrpc.RegisterTestServiceServer(srv, lookups{})
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

	for key, size := range map[string]int32{"found": 1, "missing": 0} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", key)
		_, _ = client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: size})
	}
	for _, key := range []string{"found", "missing"} {
		in, found, err := guard.Inspect(context.Background(), "", key, true)
		if err != nil || !found {
			panic(fmt.Sprint(found, err))
		}
		call, err := grpcinterceptor.DecodeRecorded(in.Response)
		if err != nil {
			panic(err)
		}
		if call.Status != nil {
			fmt.Println(key, call.Status.Code(), call.Status.Message())
			continue
		}
		fmt.Println(key, call.MessageName, call.Header.Get("order-id"))
	}
	// Output:
	// found grpc.testing.SimpleResponse [42]
	// missing NotFound no such order
}

// TestDecodeRecordedRefusesOtherBytes: bytes the interceptor did not
// record (an HTTP response's, a sealed envelope, nothing) are an error.
func TestDecodeRecordedRefusesOtherBytes(t *testing.T) {
	for _, b := range [][]byte{nil, {}, []byte("\x01\x00\xc9\x00body"), []byte("\x89IKS\x01..."), {'g', 1, 2, 0, 0}} {
		if _, err := grpcinterceptor.DecodeRecorded(b); err == nil {
			t.Errorf("DecodeRecorded(%q) accepted it", b)
		}
	}
}
