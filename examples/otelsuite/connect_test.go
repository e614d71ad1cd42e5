package otelsuite_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idemkit/connectinterceptor"
)

// startConnect serves the gRPC transport's TestService as Connect
// handlers behind connectinterceptor (UnaryCall guarded, EmptyCall
// declared NO_SIDE_EFFECTS), called over the gRPC protocol (HTTP/2
// without TLS), with the same flags and codes.
func startConnect(t *testing.T, f *fixture, cfg serverConfig) client {
	idem, err := connectinterceptor.New(f.guard,
		connectinterceptor.WithMaxResponseBytes(maxResponse),
		connectinterceptor.WithFailOpen(cfg.failOpen),
		connectinterceptor.WithWaitForResult(!cfg.noWait),
		connectinterceptor.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	// outer is the server span around the interceptor, as a Connect
	// instrumentation in front of it makes.
	outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			ctx, done := f.srv.start(ctx, f.tm.tracer(), req.Spec().Procedure, req.Header().Get("X-Test-Request"))
			defer done()
			return next(ctx, req)
		}
	})
	mux := http.NewServeMux()
	mux.Handle(unaryCall, connect.NewUnaryHandler(unaryCall,
		func(ctx context.Context, req *connect.Request[testgrpc.SimpleRequest]) (*connect.Response[testgrpc.SimpleResponse], error) {
			fl := parseFlags(req.Header().Get("X-Flags"))
			f.biz.work(ctx, fl)
			if fl.fail {
				return nil, connect.NewError(connect.CodeInternal, errors.New("failed on purpose"))
			}
			return connect.NewResponse(&testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, req.Msg.GetResponseSize())}}), nil
		}, connect.WithInterceptors(outer, idem)))
	mux.Handle(emptyCall, connect.NewUnaryHandler(emptyCall,
		func(context.Context, *connect.Request[testgrpc.Empty]) (*connect.Response[testgrpc.Empty], error) {
			return connect.NewResponse(&testgrpc.Empty{}), nil
		}, connect.WithInterceptors(outer, idem), connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	return connectClient{
		unary: connect.NewClient[testgrpc.SimpleRequest, testgrpc.SimpleResponse](hc, srv.URL+unaryCall, connect.WithGRPC()),
		empty: connect.NewClient[testgrpc.Empty, testgrpc.Empty](hc, srv.URL+emptyCall, connect.WithGRPC()),
	}
}

type connectClient struct {
	unary *connect.Client[testgrpc.SimpleRequest, testgrpc.SimpleResponse]
	empty *connect.Client[testgrpc.Empty, testgrpc.Empty]
}

func (c connectClient) call(ctx context.Context, r request) answer {
	req := connect.NewRequest(&testgrpc.SimpleRequest{
		ResponseSize: int32(parseFlags(r.flags).responseSize()),
		Payload:      &testgrpc.Payload{Body: []byte(r.body)},
	})
	req.Header().Set("X-Test-Request", r.label)
	req.Header().Set("X-Flags", r.flags)
	if r.key != "" {
		req.Header().Set("Idempotency-Key", r.key)
	}
	if r.auth != "" {
		req.Header().Set("Authorization", r.auth)
	}
	res, err := c.unary.CallUnary(ctx, req)
	if err != nil {
		return answer{status: int(connect.CodeOf(err))}
	}
	return answer{replayed: res.Header().Get("Idempotent-Replayed") == "true"}
}

func (c connectClient) passThrough(ctx context.Context, label string) answer {
	req := connect.NewRequest(&testgrpc.Empty{})
	req.Header().Set("X-Test-Request", label)
	if _, err := c.empty.CallUnary(ctx, req); err != nil {
		return answer{status: int(connect.CodeOf(err))}
	}
	return answer{}
}
