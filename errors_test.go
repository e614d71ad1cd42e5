package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

func TestErrorMatchesSentinelAndCause(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	err := fmt.Errorf("wrapped: %w", idemkit.NewError(idemkit.CodeServiceUnavailable, "acquire", "dial failed", cause))
	if !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatal("errors.Is does not match the code's sentinel")
	}
	if errors.Is(err, idemkit.ErrNetworkTimeout) {
		t.Fatal("errors.Is matches another code's sentinel")
	}
	var op *net.OpError
	if !errors.As(err, &op) || op != cause {
		t.Fatal("errors.As does not reach the native cause")
	}
	var le *idemkit.Error
	if !errors.As(err, &le) || le.Code != idemkit.CodeServiceUnavailable || le.Op != "acquire" {
		t.Fatalf("errors.As(*idemkit.Error) = %+v", le)
	}
	if got := idemkit.CodeOf(err); got != idemkit.CodeServiceUnavailable {
		t.Fatalf("CodeOf = %v", got)
	}
	want := "idemkit: acquire: ServiceUnavailable: dial failed: dial tcp: connection refused"
	if err.(interface{ Unwrap() error }).Unwrap().Error() != want {
		t.Fatalf("message %q; want %q", err.(interface{ Unwrap() error }).Unwrap().Error(), want)
	}
}

func TestEveryCodeHasNameAndSentinel(t *testing.T) {
	seen := map[error]bool{}
	for c := idemkit.CodeInvalidArgument; c <= idemkit.CodeMisconfigured; c++ {
		s := c.Sentinel()
		if s == nil || seen[s] {
			t.Fatalf("code %v: sentinel %v missing or shared", c, s)
		}
		seen[s] = true
		if strings.HasPrefix(c.String(), "Code(") || c.String() == "Unknown" {
			t.Fatalf("code %d has no name", c)
		}
		if !errors.Is(idemkit.NewError(c, "op", "", nil), s) {
			t.Fatalf("an error of code %v does not match its sentinel", c)
		}
	}
	if idemkit.CodeUnknown.Sentinel() != nil || idemkit.Code(200).Sentinel() != nil {
		t.Fatal("unknown codes have sentinels")
	}
	if idemkit.Code(200).String() != "Code(200)" {
		t.Fatal(idemkit.Code(200).String())
	}
	for c, want := range map[idemkit.Code]bool{
		idemkit.CodeServiceUnavailable: true, idemkit.CodeNetworkTimeout: true, idemkit.CodeRateLimited: true,
		idemkit.CodeInvalidArgument: false, idemkit.CodeInternal: false, idemkit.CodeAuthFailed: false, idemkit.CodeAborted: false,
		idemkit.CodeMisconfigured: false,
	} {
		if c.Transient() != want {
			t.Fatalf("%v.Transient() = %v", c, !want)
		}
	}
	for c, want := range map[idemkit.Code]bool{
		idemkit.CodeAuthFailed: true, idemkit.CodeMisconfigured: true,
		idemkit.CodeServiceUnavailable: false, idemkit.CodeNetworkTimeout: false, idemkit.CodeRateLimited: false,
		idemkit.CodeInvalidArgument: false, idemkit.CodeInternal: false, idemkit.CodeAborted: false, idemkit.CodeUnknown: false,
	} {
		if c.Permanent() != want {
			t.Fatalf("%v.Permanent() = %v", c, !want)
		}
	}
}

func TestContextErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		code idemkit.Code
	}{
		{context.Canceled, idemkit.CodeAborted},
		{context.DeadlineExceeded, idemkit.CodeNetworkTimeout},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), idemkit.CodeNetworkTimeout},
	} {
		if idemkit.CodeOf(c.err) != c.code {
			t.Fatalf("CodeOf(%v) = %v; want %v", c.err, idemkit.CodeOf(c.err), c.code)
		}
	}
	if idemkit.CodeOf(nil) != idemkit.CodeUnknown || idemkit.CodeOf(errors.New("x")) != idemkit.CodeUnknown {
		t.Fatal("nil or foreign errors are mapped")
	}

	if err := idemkit.CheckContext(context.Background(), "acquire"); err != nil {
		t.Fatalf("CheckContext on a live ctx: %v", err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	for _, c := range []struct {
		ctx  context.Context
		want error
		code idemkit.Code
	}{
		{cancelled, context.Canceled, idemkit.CodeAborted},
		{expired, context.DeadlineExceeded, idemkit.CodeNetworkTimeout},
	} {
		err := idemkit.CheckContext(c.ctx, "release")
		var ie *idemkit.Error
		if !errors.As(err, &ie) || ie.Code != c.code || ie.Op != "release" || !errors.Is(err, c.want) || !errors.Is(err, c.code.Sentinel()) {
			t.Fatalf("CheckContext after %v = %v; want %v wrapping it", c.want, err, c.code)
		}
	}

	ctx, cancelCause := context.WithCancelCause(context.Background())
	reason := errors.New("shutting down")
	cancelCause(reason)
	err := idemkit.CheckContext(ctx, "acquire")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, reason) || !errors.Is(err, idemkit.ErrAborted) {
		t.Fatalf("CheckContext with a cause = %v; want Aborted wrapping both Canceled and the cause", err)
	}
}
