package connectinterceptor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

const (
	createOrder = "/orders.v1.OrderService/CreateOrder"
	getOrder    = "/orders.v1.OrderService/GetOrder" // declared NO_SIDE_EFFECTS
)

// protocol is one of the three protocols a Connect handler serves.
type protocol struct {
	name string
	opts []connect.ClientOption
	h2c  bool // the client speaks HTTP/2 without TLS
}

func protocols() []protocol {
	return []protocol{
		{name: "connect"},
		{name: "grpc", opts: []connect.ClientOption{connect.WithGRPC()}, h2c: true},
		{name: "grpcweb", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	}
}

// service is the business behind the interceptor: CreateOrder answers
// "order <n>" (n its executions so far) with the header X-Order and the
// trailer X-Total, and misbehaves on request: the request header X-Test
// says how ("sleep", "panic", "internal", "plain": an error that is no
// *connect.Error, "declined": FailedPrecondition with a detail and
// metadata, "try-again": FailedPrecondition with a RetryInfo,
// "echo-auth": the Authorization and X-Api-Key as response headers).
type service struct {
	runs atomic.Int32
}

func (s *service) create(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	n := s.runs.Add(1)
	switch req.Header().Get("X-Test") {
	case "sleep":
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "panic":
		panic("on purpose")
	case "internal":
		return nil, connect.NewError(connect.CodeInternal, errors.New("failed on purpose"))
	case "plain":
		return nil, fmt.Errorf("plain error %d", n)
	case "try-again":
		e := connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("not yet (%d)", n))
		d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		if err != nil {
			return nil, err
		}
		e.AddDetail(d)
		return nil, e
	case "declined":
		e := connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("card declined (%d)", n))
		d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "CARD_DECLINED", Domain: "shop.example"})
		if err != nil {
			return nil, err
		}
		e.AddDetail(d)
		e.Meta().Set("X-Decline", fmt.Sprint(n))
		return nil, e
	}
	res := connect.NewResponse(wrapperspb.String(fmt.Sprint("order ", n, " of ", req.Msg.GetValue())))
	res.Header().Set("X-Order", fmt.Sprint(n))
	res.Trailer().Set("X-Total", fmt.Sprint(n*10))
	if req.Header().Get("X-Test") == "echo-auth" {
		res.Header().Set("Authorization", req.Header().Get("Authorization"))
		res.Header().Set("X-Api-Key", req.Header().Get("X-Api-Key"))
	}
	return res, nil
}

func (s *service) get(context.Context, *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	return connect.NewResponse(wrapperspb.String(fmt.Sprint("read ", s.runs.Add(1)))), nil
}

// serve serves svc behind the interceptor on a loopback listener that
// speaks HTTP/1.1 and HTTP/2 without TLS (the three protocols), and
// returns its URL.
func serve(t *testing.T, svc *service, idem connect.Interceptor) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, svc.create, connect.WithInterceptors(idem)))
	mux.Handle(getOrder, connect.NewUnaryHandler(getOrder, svc.get, connect.WithInterceptors(idem),
		connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	return listen(t, mux)
}

// listen serves h on a loopback listener that speaks HTTP/1.1 and HTTP/2
// without TLS, closed when the test ends, and returns its URL.
func listen(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// newGuard returns a guard on a memory store of its own.
func newGuard(t *testing.T) *middleware.Guard {
	t.Helper()
	guard, err := middleware.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	return guard
}

// newIdem builds the server interceptor on guard, logging nothing.
func newIdem(t *testing.T, guard *middleware.Guard, opts ...connectinterceptor.Option) connect.Interceptor {
	t.Helper()
	idem, err := connectinterceptor.New(guard, append([]connectinterceptor.Option{connectinterceptor.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return idem
}

// caller calls the service's procedures over one protocol.
type caller struct {
	create, get *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue]
}

func newCaller(t *testing.T, url string, p protocol, opts ...connect.ClientOption) caller {
	t.Helper()
	tr := &http.Transport{}
	if p.h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	opts = append(append([]connect.ClientOption(nil), p.opts...), opts...)
	return caller{
		create: connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, url+createOrder, opts...),
		get: connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, url+getOrder,
			append(opts, connect.WithIdempotency(connect.IdempotencyNoSideEffects))...),
	}
}

// call is one call's request: the payload and the request header fields,
// given as name, value pairs ("Idempotency-Key", ...).
func (c caller) call(t *testing.T, payload string, header ...string) (*connect.Response[wrapperspb.StringValue], error) {
	t.Helper()
	req := connect.NewRequest(wrapperspb.String(payload))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header().Add(header[i], header[i+1])
	}
	return c.create.CallUnary(t.Context(), req)
}

// wantRefusal checks that err is a Connect error with code and an
// ErrorInfo detail of the idemkit.dev domain with reason, and a
// RetryInfo detail exactly when retry is set.
func wantRefusal(t *testing.T, err error, code connect.Code, reason string, retry bool) {
	t.Helper()
	ce := new(connect.Error)
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Fatalf("%v; want a %v error", err, code)
	}
	var info *errdetails.ErrorInfo
	var hasRetry bool
	for _, d := range ce.Details() {
		switch v, _ := d.Value(); v := v.(type) {
		case *errdetails.ErrorInfo:
			info = v
		case *errdetails.RetryInfo:
			hasRetry = v.GetRetryDelay().AsDuration() > 0
		}
	}
	if info.GetReason() != reason || info.GetDomain() != "idemkit.dev" || hasRetry != retry {
		t.Fatalf("%v: ErrorInfo %v, RetryInfo %v; want reason %s in idemkit.dev, RetryInfo %v", err, info, hasRetry, reason, retry)
	}
}
