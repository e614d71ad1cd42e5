package grpcinterceptor_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// stepService answers UnaryCall in two steps (middleware.Step "reserve"
// then "charge", each answering the number of its run) with both results
// in ServerId and Hostname; the first call that gets past "reserve" fails
// with Unavailable before "charge".
type stepService struct {
	testgrpc.UnimplementedTestServiceServer
	runs   [2]atomic.Int32
	failed atomic.Bool
}

func (s *stepService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	var got [2]string
	for i, name := range []string{"reserve", "charge"} {
		if i == 1 && s.failed.CompareAndSwap(false, true) {
			return nil, status.Error(codes.Unavailable, "failing after the first step, as asked")
		}
		res, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
			return []byte(strconv.Itoa(int(s.runs[i].Add(1)))), nil
		})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		got[i] = string(res)
	}
	return &testgrpc.SimpleResponse{ServerId: got[0], Hostname: got[1]}, nil
}

// TestHandlerSteps: a gRPC handler reads the step helper from its ctx. A
// call that fails after its first step (Unavailable, not recorded) is
// retried: the retry resumes at the second step with the first step's
// recorded result, and a later retry replays the answer.
func TestHandlerSteps(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	g, err := middleware.New(s, middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	svc := &stepService{}
	c := dial(t, serve(t, g, svc))
	ctx := withKey(t.Context(), "steps-1")
	if first := unary(ctx, c, &testgrpc.SimpleRequest{}); status.Code(first.err) != codes.Unavailable {
		t.Fatalf("first call: %v; want Unavailable after the first step", first.err)
	}
	retry := unary(ctx, c, &testgrpc.SimpleRequest{})
	if retry.err != nil || retry.replayed() || retry.resp.GetServerId() != "1" || retry.resp.GetHostname() != "1" {
		t.Fatalf("retry: %v replayed=%v %v; want reserve 1 (recorded) and charge 1", retry.err, retry.replayed(), retry.resp)
	}
	if again := unary(ctx, c, &testgrpc.SimpleRequest{}); again.err != nil || !again.replayed() {
		t.Fatalf("later retry: %v replayed=%v; want the replay", again.err, again.replayed())
	}
	if r0, r1 := svc.runs[0].Load(), svc.runs[1].Load(); r0 != 1 || r1 != 1 {
		t.Fatalf("the steps ran %d and %d times; want once each", r0, r1)
	}
}
