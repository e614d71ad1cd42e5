package firestorelock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// secret stands for a key quoted by a gRPC status message (Firestore
// names documents in its messages); no mapped error may print it.
const secret = "projects/p/databases/(default)/documents/idemkit_locks/k:secret-key"

// TestMapErrorByCode maps every gRPC status code, bare and wrapped, and
// checks the lock code, the sentinel, that the original status is still
// reachable, and that the message no longer quotes the document.
func TestMapErrorByCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code codes.Code
		want idemkit.Code
	}{
		{codes.Unavailable, idemkit.CodeServiceUnavailable},
		{codes.Canceled, idemkit.CodeServiceUnavailable},
		{codes.Aborted, idemkit.CodeServiceUnavailable},
		{codes.Internal, idemkit.CodeServiceUnavailable},
		{codes.DeadlineExceeded, idemkit.CodeNetworkTimeout},
		{codes.ResourceExhausted, idemkit.CodeRateLimited},
		{codes.PermissionDenied, idemkit.CodeAuthFailed},
		{codes.Unauthenticated, idemkit.CodeAuthFailed},
		{codes.InvalidArgument, idemkit.CodeInvalidArgument},
		{codes.OutOfRange, idemkit.CodeInvalidArgument},
		{codes.FailedPrecondition, idemkit.CodeInvalidArgument},
		{codes.NotFound, idemkit.CodeInvalidArgument},
		{codes.AlreadyExists, idemkit.CodeInternal},
		{codes.Unimplemented, idemkit.CodeInternal},
		{codes.DataLoss, idemkit.CodeInternal},
		{codes.Unknown, idemkit.CodeInternal},
	} {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/wrapped=%v", tc.code, wrapped), func(t *testing.T) {
				native := status.Error(tc.code, "document "+secret+" says no")
				in := native
				if wrapped {
					in = fmt.Errorf("firestore: commit: %w", native)
				}
				err := firestorelock.MapError(context.Background(), "acquire", in)
				checkMapped(t, err, tc.want)
				if got := status.Code(err); got != tc.code {
					t.Fatalf("status.Code(mapped) = %v; want %v (the cause must stay reachable)", got, tc.code)
				}
				if !errors.Is(err, native) {
					t.Fatal("errors.Is(mapped, original) is false")
				}
			})
		}
	}
}

// TestMapErrorByType maps errors that carry no gRPC status, and errors met
// after the caller's ctx ended.
func TestMapErrorByType(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	timeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want idemkit.Code
		is   error
	}{
		{"context-canceled", context.Background(), context.Canceled, idemkit.CodeAborted, context.Canceled},
		{"context-deadline", context.Background(), context.DeadlineExceeded, idemkit.CodeNetworkTimeout, context.DeadlineExceeded},
		{"net-timeout", context.Background(), timeout, idemkit.CodeNetworkTimeout, os.ErrDeadlineExceeded},
		{"refused", context.Background(), &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, idemkit.CodeServiceUnavailable, syscall.ECONNREFUSED},
		{"reset", context.Background(), fmt.Errorf("read: %w", syscall.ECONNRESET), idemkit.CodeServiceUnavailable, syscall.ECONNRESET},
		{"eof", context.Background(), io.EOF, idemkit.CodeServiceUnavailable, io.EOF},
		{"unexpected-eof", context.Background(), io.ErrUnexpectedEOF, idemkit.CodeServiceUnavailable, io.ErrUnexpectedEOF},
		{"closed", context.Background(), net.ErrClosed, idemkit.CodeServiceUnavailable, net.ErrClosed},
		{"other", context.Background(), errors.New("something odd"), idemkit.CodeInternal, nil},
		{"ctx-canceled-then-unavailable", canceled, status.Error(codes.Unavailable, secret), idemkit.CodeAborted, context.Canceled},
		{"ctx-expired-then-canceled", expired, status.Error(codes.Canceled, secret), idemkit.CodeNetworkTimeout, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := firestorelock.MapError(tc.ctx, "release", tc.err)
			checkMapped(t, err, tc.want)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("errors.Is(%v, %v) is false", err, tc.is)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("the mapped error %v does not unwrap to the native one", err)
			}
		})
	}
	if err := firestorelock.MapError(context.Background(), "acquire", nil); err != nil {
		t.Fatalf("MapError(nil) = %v", err)
	}
	le := idemkit.NewError(idemkit.CodeInternal, "acquire", "x", nil)
	if err := firestorelock.MapError(context.Background(), "release", le); err != le {
		t.Fatalf("MapError(*idemkit.Error) = %v; want it unchanged", err)
	}
}

func checkMapped(t *testing.T, err error, want idemkit.Code) {
	t.Helper()
	var le *idemkit.Error
	if !errors.As(err, &le) {
		t.Fatalf("%v (%T) is not a *idemkit.Error", err, err)
	}
	if le.Code != want || !errors.Is(err, want.Sentinel()) {
		t.Fatalf("code %v (%v); want %v", le.Code, err, want)
	}
	if strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("the message quotes the document name: %v", err)
	}
}
