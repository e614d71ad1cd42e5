package firestorestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// TestMapError checks the code of every native failure, by gRPC status
// code or error type, that the result unwraps to the code's sentinel and
// the native error, and that a status message (which can quote a document
// name, and so a key) never reaches the text.
func TestMapError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want idemkit.Code
	}{
		{status.Error(codes.Unavailable, "secret"), idemkit.CodeServiceUnavailable},
		{status.Error(codes.Canceled, "secret"), idemkit.CodeServiceUnavailable},
		{status.Error(codes.Aborted, "secret"), idemkit.CodeServiceUnavailable},
		{status.Error(codes.Internal, "secret"), idemkit.CodeServiceUnavailable},
		{status.Error(codes.DeadlineExceeded, "secret"), idemkit.CodeNetworkTimeout},
		{status.Error(codes.ResourceExhausted, "secret"), idemkit.CodeRateLimited},
		{status.Error(codes.PermissionDenied, "secret"), idemkit.CodeAuthFailed},
		{status.Error(codes.Unauthenticated, "secret"), idemkit.CodeAuthFailed},
		{status.Error(codes.InvalidArgument, "secret"), idemkit.CodeInvalidArgument},
		{status.Error(codes.FailedPrecondition, "secret"), idemkit.CodeMisconfigured},
		{status.Error(codes.NotFound, "secret"), idemkit.CodeMisconfigured},
		{status.Error(codes.DataLoss, "secret"), idemkit.CodeInternal},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), idemkit.CodeServiceUnavailable},
		{io.EOF, idemkit.CodeServiceUnavailable},
		{context.DeadlineExceeded, idemkit.CodeNetworkTimeout},
		{errors.New("secret"), idemkit.CodeInternal},
	} {
		err := mapError(context.Background(), "claim", tc.err)
		if got := idemkit.CodeOf(err); got != tc.want {
			t.Errorf("%v: code %v; want %v", tc.err, got, tc.want)
		}
		if !errors.Is(err, tc.want.Sentinel()) || !errors.Is(err, tc.err) {
			t.Errorf("%v: %v does not unwrap to its sentinel and cause", tc.err, err)
		}
		if status.Code(err) != status.Code(tc.err) {
			t.Errorf("%v: the status is not reachable", tc.err)
		}
		if _, ok := status.FromError(tc.err); ok && strings.Contains(err.Error(), "secret") {
			t.Errorf("%v: the status message reached the text: %v", tc.err, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mapError(ctx, "claim", status.Error(codes.Canceled, "x")); idemkit.CodeOf(err) != idemkit.CodeAborted {
		t.Errorf("an ended ctx: %v; want Aborted", err)
	}
	// A commit that a read shows did not land: its refusal is transient.
	for _, c := range []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists} {
		if err := mapCommitError(context.Background(), "complete", status.Error(c, "secret")); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable || status.Code(err) != c {
			t.Errorf("a refused commit (%v): %v; want ServiceUnavailable with the status", c, err)
		}
	}
	big := tooLargeRefused(context.Background(), "complete", 1<<21, status.Error(codes.InvalidArgument, "secret"))
	if !errors.Is(big, store.ErrTooLarge) || idemkit.CodeOf(big) != idemkit.CodeInvalidArgument || strings.Contains(big.Error(), "secret") {
		t.Errorf("a refused large document: %v", big)
	}
}
