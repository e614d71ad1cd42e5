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

	"github.com/idemkit/idemkit/lock"
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
		want lock.Code
	}{
		{codes.Unavailable, lock.CodeServiceUnavailable},
		{codes.Canceled, lock.CodeServiceUnavailable},
		{codes.Aborted, lock.CodeServiceUnavailable},
		{codes.Internal, lock.CodeServiceUnavailable},
		{codes.DeadlineExceeded, lock.CodeNetworkTimeout},
		{codes.ResourceExhausted, lock.CodeRateLimited},
		{codes.PermissionDenied, lock.CodeAuthFailed},
		{codes.Unauthenticated, lock.CodeAuthFailed},
		{codes.InvalidArgument, lock.CodeInvalidArgument},
		{codes.OutOfRange, lock.CodeInvalidArgument},
		{codes.FailedPrecondition, lock.CodeInvalidArgument},
		{codes.NotFound, lock.CodeInvalidArgument},
		{codes.AlreadyExists, lock.CodeInternal},
		{codes.Unimplemented, lock.CodeInternal},
		{codes.DataLoss, lock.CodeInternal},
		{codes.Unknown, lock.CodeInternal},
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
		want lock.Code
		is   error
	}{
		{"context-canceled", context.Background(), context.Canceled, lock.CodeAborted, context.Canceled},
		{"context-deadline", context.Background(), context.DeadlineExceeded, lock.CodeNetworkTimeout, context.DeadlineExceeded},
		{"net-timeout", context.Background(), timeout, lock.CodeNetworkTimeout, os.ErrDeadlineExceeded},
		{"refused", context.Background(), &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, lock.CodeServiceUnavailable, syscall.ECONNREFUSED},
		{"reset", context.Background(), fmt.Errorf("read: %w", syscall.ECONNRESET), lock.CodeServiceUnavailable, syscall.ECONNRESET},
		{"eof", context.Background(), io.EOF, lock.CodeServiceUnavailable, io.EOF},
		{"unexpected-eof", context.Background(), io.ErrUnexpectedEOF, lock.CodeServiceUnavailable, io.ErrUnexpectedEOF},
		{"closed", context.Background(), net.ErrClosed, lock.CodeServiceUnavailable, net.ErrClosed},
		{"other", context.Background(), errors.New("something odd"), lock.CodeInternal, nil},
		{"ctx-canceled-then-unavailable", canceled, status.Error(codes.Unavailable, secret), lock.CodeAborted, context.Canceled},
		{"ctx-expired-then-canceled", expired, status.Error(codes.Canceled, secret), lock.CodeNetworkTimeout, context.DeadlineExceeded},
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
	le := lock.NewError(lock.CodeInternal, "acquire", "x", nil)
	if err := firestorelock.MapError(context.Background(), "release", le); err != le {
		t.Fatalf("MapError(*lock.Error) = %v; want it unchanged", err)
	}
}

func checkMapped(t *testing.T, err error, want lock.Code) {
	t.Helper()
	var le *lock.Error
	if !errors.As(err, &le) {
		t.Fatalf("%v (%T) is not a *lock.Error", err, err)
	}
	if le.Code != want || !errors.Is(err, want.Sentinel()) {
		t.Fatalf("code %v (%v); want %v", le.Code, err, want)
	}
	if strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("the message quotes the document name: %v", err)
	}
}
