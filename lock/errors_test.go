package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/lock"
)

func TestErrorMatchesSentinelAndCause(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	err := fmt.Errorf("wrapped: %w", lock.NewError(lock.CodeServiceUnavailable, "acquire", "dial failed", cause))
	if !errors.Is(err, lock.ErrServiceUnavailable) {
		t.Fatal("errors.Is does not match the code's sentinel")
	}
	if errors.Is(err, lock.ErrNetworkTimeout) {
		t.Fatal("errors.Is matches another code's sentinel")
	}
	var op *net.OpError
	if !errors.As(err, &op) || op != cause {
		t.Fatal("errors.As does not reach the native cause")
	}
	var le *lock.Error
	if !errors.As(err, &le) || le.Code != lock.CodeServiceUnavailable || le.Op != "acquire" {
		t.Fatalf("errors.As(*lock.Error) = %+v", le)
	}
	if got := lock.CodeOf(err); got != lock.CodeServiceUnavailable {
		t.Fatalf("CodeOf = %v", got)
	}
	want := "lock: acquire: ServiceUnavailable: dial failed: dial tcp: connection refused"
	if err.(interface{ Unwrap() error }).Unwrap().Error() != want {
		t.Fatalf("message %q; want %q", err.(interface{ Unwrap() error }).Unwrap().Error(), want)
	}
}

func TestEveryCodeHasNameAndSentinel(t *testing.T) {
	seen := map[error]bool{}
	for c := lock.CodeInvalidArgument; c <= lock.CodeInternal; c++ {
		s := c.Sentinel()
		if s == nil || seen[s] {
			t.Fatalf("code %v: sentinel %v missing or shared", c, s)
		}
		seen[s] = true
		if strings.HasPrefix(c.String(), "Code(") || c.String() == "Unknown" {
			t.Fatalf("code %d has no name", c)
		}
		if !errors.Is(lock.NewError(c, "op", "", nil), s) {
			t.Fatalf("an error of code %v does not match its sentinel", c)
		}
	}
	if lock.CodeUnknown.Sentinel() != nil || lock.Code(200).Sentinel() != nil {
		t.Fatal("unknown codes have sentinels")
	}
	if lock.Code(200).String() != "Code(200)" {
		t.Fatal(lock.Code(200).String())
	}
	for c, want := range map[lock.Code]bool{
		lock.CodeServiceUnavailable: true, lock.CodeNetworkTimeout: true, lock.CodeRateLimited: true,
		lock.CodeInvalidArgument: false, lock.CodeInternal: false, lock.CodeAuthFailed: false, lock.CodeAborted: false,
	} {
		if c.Transient() != want {
			t.Fatalf("%v.Transient() = %v", c, !want)
		}
	}
}

func TestContextErrors(t *testing.T) {
	cases := []struct {
		err  error
		code lock.Code
	}{
		{context.Canceled, lock.CodeAborted},
		{context.DeadlineExceeded, lock.CodeNetworkTimeout},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), lock.CodeNetworkTimeout},
	}
	for _, c := range cases {
		err := lock.ContextError("release", c.err)
		if lock.CodeOf(err) != c.code || !errors.Is(err, c.err) || !errors.Is(err, c.code.Sentinel()) {
			t.Fatalf("ContextError(%v) = %v", c.err, err)
		}
		if lock.CodeOf(c.err) != c.code {
			t.Fatalf("CodeOf(%v) = %v; want %v", c.err, lock.CodeOf(c.err), c.code)
		}
	}
	if lock.ContextError("x", nil) != nil || lock.CodeOf(nil) != lock.CodeUnknown || lock.CodeOf(errors.New("x")) != lock.CodeUnknown {
		t.Fatal("nil or foreign errors are mapped")
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	if err := lock.CheckContext(ctx, "acquire"); err != nil {
		t.Fatalf("CheckContext on a live ctx: %v", err)
	}
	reason := errors.New("shutting down")
	cancel(reason)
	err := lock.CheckContext(ctx, "acquire")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, reason) || !errors.Is(err, lock.ErrAborted) {
		t.Fatalf("CheckContext with a cause = %v; want Aborted wrapping both Canceled and the cause", err)
	}
}
