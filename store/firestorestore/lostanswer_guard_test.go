package firestorestore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
)

// TestGuardCompletionOutlivesItsTimeout: the completion's commit lands,
// but its answer comes only after the guard's op timeout, so the guard
// sees a timeout and tries again; the retry finds the outcome already
// there and is refused. The guard must tell that the outcome it finds is
// its own: the execution is recorded (no not-recorded event), and a retry
// replays it.
func TestGuardCompletionOutlivesItsTimeout(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	var late atomic.Int32
	slowAnswer := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if _, ok := req.(*pb.CommitRequest); ok && err == nil && armed.CompareAndSwap(true, false) {
			late.Add(1)
			<-ctx.Done() // the answer arrives after the caller stopped waiting
			return ctx.Err()
		}
		return err
	})
	var notRecorded atomic.Int32
	hook := middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventNotRecorded {
			notRecorded.Add(1)
		}
	})
	g := newGuard(t, client(t, testenv.FirestoreProject(t), slowAnswer),
		middleware.WithOpTimeout(2*time.Second), middleware.WithHook(hook))
	fp := fingerprint.New("test", [32]byte{9})
	var runs atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		armed.Store(true) // the next commit is the completion's
		return middleware.Result{Value: []byte("charged")}, nil
	}
	out, err := g.Execute(t.Context(), "order-1", fp, work)
	if err != nil || !out.Recorded || late.Load() != 1 {
		t.Fatalf("first execution: recorded %v, %v (%d late answers); want recorded", out.Recorded, err, late.Load())
	}
	if n := notRecorded.Load(); n != 0 {
		t.Fatalf("%d not-recorded events for an outcome that landed", n)
	}
	out, err = g.Execute(t.Context(), "order-1", fp, work)
	if err != nil || !out.Replayed || string(out.Value) != "charged" || runs.Load() != 1 {
		t.Fatalf("retry: %+v, %v, %d runs; want a replay", out, err, runs.Load())
	}
}
