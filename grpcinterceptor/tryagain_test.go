package grpcinterceptor_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/grpcinterceptor"
)

// tryAgain is a status that asks the client to call again: code, with a
// RetryInfo of 7 s when retry is set.
func tryAgain(t *testing.T, code codes.Code, retry bool) *status.Status {
	t.Helper()
	st := status.New(code, "call again")
	if !retry {
		return st
	}
	st, err := st.WithDetails(retryInfo(7 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTryAgainAnswersNotRecorded: a handler's answer that asks the client
// to call again — Aborted (retry the sequence), Unauthenticated (call
// with credentials), ResourceExhausted, and any code with a RetryInfo
// detail — is delivered with its RetryInfo and not recorded, so the
// client's retry with the same key runs the handler again and can
// succeed; that success is then recorded and replayed.
func TestTryAgainAnswersNotRecorded(t *testing.T) {
	for _, c := range []struct {
		name  string
		code  codes.Code
		retry bool
	}{
		{"Aborted", codes.Aborted, false},
		{"Aborted with RetryInfo", codes.Aborted, true},
		{"Unauthenticated", codes.Unauthenticated, false},
		{"ResourceExhausted with RetryInfo", codes.ResourceExhausted, true},
		{"FailedPrecondition with RetryInfo", codes.FailedPrecondition, true},
		{"PermissionDenied with RetryInfo", codes.PermissionDenied, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := newService()
			svc.firstErr = tryAgain(t, c.code, c.retry).Err()
			client := dial(t, serve(t, newBackend().guard(t), svc))
			ctx := withKey(t.Context(), "k")
			req := &testgrpc.SimpleRequest{}
			first := unary(ctx, client, req)
			if status.Code(first.err) != c.code || first.replayed() {
				t.Fatalf("first: %v replayed=%v; want %v delivered", first.err, first.replayed(), c.code)
			}
			if d, ok := grpcinterceptor.RetryDelayOf(first.err); ok != c.retry || ok && d != 7*time.Second {
				t.Fatalf("first: RetryInfo %v, %v; want it delivered as sent", d, ok)
			}
			retry := unary(ctx, client, req)
			if retry.err != nil || retry.replayed() || retry.resp.GetServerId() != "2" {
				t.Fatalf("retry: %v replayed=%v; want a second execution that succeeds", retry.err, retry.replayed())
			}
			again := unary(ctx, client, req)
			if again.err != nil || !again.replayed() || again.resp.GetServerId() != "2" {
				t.Fatalf("third call: %v replayed=%v; want the success replayed", again.err, again.replayed())
			}
			if n := svc.executions.Load(); n != 2 {
				t.Fatalf("executions = %d, want 2", n)
			}
		})
	}
}

// TestTryAgainRecordedWhenThePolicySaysSo: with StorePolicy.TryAgain, a
// business error with a RetryInfo detail is recorded and replayed with
// its RetryInfo; Forget still decides by code.
func TestTryAgainRecordedWhenThePolicySaysSo(t *testing.T) {
	svc := newService()
	svc.firstErr = tryAgain(t, codes.FailedPrecondition, true).Err()
	client := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithStorePolicy(grpcinterceptor.StorePolicy{TryAgain: true})))
	ctx := withKey(t.Context(), "k")
	_ = unary(ctx, client, &testgrpc.SimpleRequest{})
	again := unary(ctx, client, &testgrpc.SimpleRequest{})
	if status.Code(again.err) != codes.FailedPrecondition || !again.replayed() {
		t.Fatalf("retry: %v replayed=%v; want the recorded answer", again.err, again.replayed())
	}
	if d, ok := grpcinterceptor.RetryDelayOf(again.err); !ok || d != 7*time.Second {
		t.Fatalf("replayed RetryInfo %v, %v; want 7s", d, ok)
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}
