package grpcinterceptor_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

const (
	unaryCall     = "/grpc.testing.TestService/UnaryCall"
	emptyCall     = "/grpc.testing.TestService/EmptyCall"
	cacheableCall = "/grpc.testing.TestService/CacheableUnaryCall"
	keyMD         = "idempotency-key"
)

// service is the TestService the tests serve. UnaryCall counts its
// executions, answers the execution number in ServerId, sets header and
// trailer metadata, answers response_status as a status with details, and
// can be made to block, to fail a key's first attempt with Unavailable, or
// to panic.
type service struct {
	testgrpc.UnimplementedTestServiceServer

	executions atomic.Int64
	started    chan struct{} // if not nil, receives once per execution
	release    chan struct{} // if not nil, executions wait for it to close
	finished   chan error    // if not nil, receives each execution's error
	failFirst  bool          // a key's first attempt answers Unavailable
	firstErr   error         // if not nil, a key's first attempt answers it (after setting the metadata)
	panicky    bool          // executions panic

	mu       sync.Mutex
	attempts map[string]int // attempts seen per key
}

func newService() *service { return &service{attempts: map[string]int{}} }

func (s *service) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return s.serve(ctx, req)
}

func (s *service) CacheableUnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return s.serve(ctx, req)
}

func (s *service) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.executions.Add(1)
	return &testgrpc.Empty{}, nil
}

func (s *service) serve(ctx context.Context, req *testgrpc.SimpleRequest) (resp *testgrpc.SimpleResponse, err error) {
	if s.finished != nil {
		defer func() { s.finished <- err }()
	}
	key := ""
	if v := metadata.ValueFromIncomingContext(ctx, keyMD); len(v) > 0 {
		key = v[0]
	}
	s.mu.Lock()
	s.attempts[key]++
	first := s.attempts[key] == 1
	s.mu.Unlock()
	n := s.executions.Add(1)
	if s.started != nil {
		s.started <- struct{}{}
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if s.panicky {
		panic("on purpose")
	}
	if s.failFirst && first {
		return nil, status.Error(codes.Unavailable, "the first attempt fails on purpose")
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-execution", strconv.FormatInt(n, 10), "x-data-bin", "\x00\x01\xff")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"+strconv.FormatInt(n, 10))); err != nil {
		return nil, err
	}
	if s.firstErr != nil && first {
		return nil, s.firstErr
	}
	if rs := req.GetResponseStatus(); rs.GetCode() != 0 {
		st, err := status.New(codes.Code(rs.GetCode()), rs.GetMessage()).WithDetails(
			&errdetails.ErrorInfo{Reason: "OUT_OF_STOCK", Domain: "shop.example", Metadata: map[string]string{"execution": strconv.FormatInt(n, 10)}},
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "payload", Description: "too many"}}},
		)
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return &testgrpc.SimpleResponse{
		ServerId: strconv.FormatInt(n, 10),
		Payload:  &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())},
	}, nil
}

// keysSeen returns how many distinct keys reached the service and the
// attempts of each.
func (s *service) keysSeen() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.attempts))
	for k, v := range s.attempts {
		m[k] = v
	}
	return m
}

// backend is one shared memory backend, the store every guard of a test
// uses, behind a wrapper that can be made to fail.
type backend struct {
	store *flakyStore
}

func newBackend() *backend {
	return &backend{store: &flakyStore{Store: memstore.New()}}
}

func (b *backend) guard(t testing.TB, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	opts = append([]middleware.Option{middleware.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	g, err := middleware.New(b.store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var errOutage = idemkit.NewError(idemkit.CodeServiceUnavailable, "test", "injected outage", nil)

// flakyStore is a store that fails every call while fail is set, as a
// store whose server went away does, and counts the claims it is asked
// for (a call the guard records starts with one).
type flakyStore struct {
	store.Store
	fail   atomic.Bool
	claims atomic.Int64
}

func (f *flakyStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	f.claims.Add(1)
	if f.fail.Load() {
		return store.Record{}, false, errOutage
	}
	return f.Store.Claim(ctx, key, fp, ttl)
}

func (f *flakyStore) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	if f.fail.Load() {
		return time.Time{}, false, errOutage
	}
	return f.Store.Extend(ctx, key, fence, ttl)
}

func (f *flakyStore) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	if f.fail.Load() {
		return false, errOutage
	}
	return f.Store.Complete(ctx, rec, ttl)
}

func (f *flakyStore) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	if f.fail.Load() {
		return false, errOutage
	}
	return f.Store.Release(ctx, key, fence)
}

func (f *flakyStore) Get(ctx context.Context, key string) (store.Record, bool, error) {
	if f.fail.Load() {
		return store.Record{}, false, errOutage
	}
	return f.Store.Get(ctx, key)
}

func (f *flakyStore) Delete(ctx context.Context, key string) (bool, error) {
	if f.fail.Load() {
		return false, errOutage
	}
	return f.Store.Delete(ctx, key)
}

// serve starts a gRPC server for svc on a loopback port, with the server
// interceptor for g, and returns its address.
func serve(t testing.TB, g *middleware.Guard, svc testgrpc.TestServiceServer, opts ...grpcinterceptor.Option) string {
	t.Helper()
	return serveChain(t, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, svc) }, serverInterceptor(t, g, opts...))
}

// serverInterceptor returns New's interceptor for g with opts (and a
// discarding logger); it fails t if they are invalid.
func serverInterceptor(t testing.TB, g *middleware.Guard, opts ...grpcinterceptor.Option) grpc.UnaryServerInterceptor {
	t.Helper()
	opts = append([]grpcinterceptor.Option{grpcinterceptor.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	idem, err := grpcinterceptor.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return idem
}

// serveChain starts a gRPC server on a loopback port with the unary
// interceptors chain (the first one outermost) and the services register
// adds, and returns its address.
func serveChain(t testing.TB, register func(*grpc.Server), chain ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	return serveChainWith(t, nil, register, chain...)
}

// serveChainWith is serveChain with server options (transport
// credentials, say).
func serveChainWith(t testing.TB, opts []grpc.ServerOption, register func(*grpc.Server), chain ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(chain...))...)
	register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ln.Addr().String()
}

// clientInterceptor returns NewClientInterceptor's interceptor with opts;
// it fails t if they are invalid.
func clientInterceptor(t testing.TB, opts ...grpcinterceptor.Option) grpc.UnaryClientInterceptor {
	t.Helper()
	ci, err := grpcinterceptor.NewClientInterceptor(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

// dial returns a client of the TestService at addr.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	return testgrpc.NewTestServiceClient(dialConn(t, addr, opts...))
}

// dialConn returns a client connection to addr, closed when t ends.
func dialConn(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// withKey returns ctx with the idempotency key in its outgoing metadata.
func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, keyMD, key)
}

// answer is what one call got back.
type answer struct {
	resp    *testgrpc.SimpleResponse
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (a answer) replayed() bool { return grpcinterceptor.Replayed(a.header) }

func unary(ctx context.Context, c testgrpc.TestServiceClient, req *testgrpc.SimpleRequest) answer {
	var a answer
	a.resp, a.err = c.UnaryCall(ctx, req, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

// checkRefusal checks that err is a status with code and an ErrorInfo of
// the idemkit domain with reason, and whether it carries a RetryInfo.
func checkRefusal(t *testing.T, err error, code codes.Code, reason string, retryInfo bool) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	ei := grpcinterceptor.ErrorInfoOf(err)
	if ei == nil {
		t.Fatalf("no ErrorInfo in %v", err)
	}
	if ei.GetReason() != reason || ei.GetDomain() != "idemkit.dev" {
		t.Fatalf("ErrorInfo = %s/%s, want %s/%s", ei.GetDomain(), ei.GetReason(), "idemkit.dev", reason)
	}
	d, ok := grpcinterceptor.RetryDelayOf(err)
	if ok != retryInfo {
		t.Fatalf("RetryInfo present = %v, want %v", ok, retryInfo)
	}
	if ok && d <= 0 {
		t.Fatalf("RetryInfo delay = %v", d)
	}
}

// waitFor waits for ch to deliver, with a generous guard against hangs.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}
