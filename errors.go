package idemkit

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies a failure. Contention and "not found" are results, never
// codes: a Code always means the operation could not give an answer.
type Code uint8

// The failure codes. Their zero value, CodeUnknown, is never produced by this
// package; [CodeOf] reports it for errors that carry no code.
const (
	CodeUnknown            Code = iota
	CodeInvalidArgument         // the caller passed a malformed key, lock id, TTL or option
	CodeServiceUnavailable      // the backend cannot be reached or refused the connection
	CodeNetworkTimeout          // the backend did not answer in time (includes a ctx deadline)
	CodeAcquisitionTimeout      // lock.Do ran out of time or attempts waiting for the lock
	CodeAborted                 // the caller's ctx was cancelled
	CodeAuthFailed              // the backend rejected the credentials or permissions
	CodeRateLimited             // the backend refused for quota or too many connections
	CodeInternal                // an invariant broke: fence overflow, a malformed backend reply
	CodeMisconfigured           // the backend is not set up for the store (a missing table, schema, column, index or database); the detail names the fix
)

// Sentinels, one per code. Every [*Error] matches the sentinel of its code
// with errors.Is.
var (
	ErrInvalidArgument    = errors.New("idemkit: invalid argument")
	ErrServiceUnavailable = errors.New("idemkit: service unavailable")
	ErrNetworkTimeout     = errors.New("idemkit: network timeout")
	ErrAcquisitionTimeout = errors.New("idemkit: acquisition timeout")
	ErrAborted            = errors.New("idemkit: aborted")
	ErrAuthFailed         = errors.New("idemkit: authentication failed")
	ErrRateLimited        = errors.New("idemkit: rate limited")
	ErrInternal           = errors.New("idemkit: internal error")
	ErrMisconfigured      = errors.New("idemkit: backend misconfigured")
)

// ErrLeaseLost is matched (errors.Is) when a lease ran out or passed to
// another holder while its holder was still working: by the error
// lock.Do returns and the cause of its fn's ctx, and by the guard's answer
// and the cause of the work's ctx when a claim's lease is lost. It is a
// result of the race for a key, not a [Code]: the error that wraps it
// carries the code (the guard's is Unavailable).
var ErrLeaseLost = errors.New("idemkit: lease lost")

var codeNames = [...]string{
	CodeUnknown:            "Unknown",
	CodeInvalidArgument:    "InvalidArgument",
	CodeServiceUnavailable: "ServiceUnavailable",
	CodeNetworkTimeout:     "NetworkTimeout",
	CodeAcquisitionTimeout: "AcquisitionTimeout",
	CodeAborted:            "Aborted",
	CodeAuthFailed:         "AuthFailed",
	CodeRateLimited:        "RateLimited",
	CodeInternal:           "Internal",
	CodeMisconfigured:      "Misconfigured",
}

var codeSentinels = [...]error{
	CodeInvalidArgument:    ErrInvalidArgument,
	CodeServiceUnavailable: ErrServiceUnavailable,
	CodeNetworkTimeout:     ErrNetworkTimeout,
	CodeAcquisitionTimeout: ErrAcquisitionTimeout,
	CodeAborted:            ErrAborted,
	CodeAuthFailed:         ErrAuthFailed,
	CodeRateLimited:        ErrRateLimited,
	CodeInternal:           ErrInternal,
	CodeMisconfigured:      ErrMisconfigured,
}

// String returns the code's name, such as "InvalidArgument".
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Sentinel returns the sentinel error of the code, or nil for CodeUnknown.
func (c Code) Sentinel() error {
	if int(c) < len(codeSentinels) {
		return codeSentinels[c]
	}
	return nil
}

// Transient reports whether an operation that failed with this code may
// succeed if tried again unchanged: ServiceUnavailable, NetworkTimeout and
// RateLimited. [Code.Permanent] codes are the opposite.
func (c Code) Transient() bool {
	return c == CodeServiceUnavailable || c == CodeNetworkTimeout || c == CodeRateLimited
}

// Permanent reports whether an operation that failed with this code fails
// the same way until an operator changes the backend's setup: AuthFailed
// (credentials, permissions) and Misconfigured (a missing table, schema or
// database). Retrying it cannot help.
func (c Code) Permanent() bool {
	return c == CodeAuthFailed || c == CodeMisconfigured
}

// Error is the one error type of idemkit. It carries a [Code], the
// operation that failed ("acquire", "release", ...), an optional detail and
// the native cause. errors.Is matches both the code's sentinel and anything
// the cause matches; errors.As reaches the cause (a go-redis error, a
// *pgconn.PgError, a gRPC status, a context error).
//
// Messages never contain a raw key or lock id.
type Error struct {
	Code   Code
	Op     string // the operation: "acquire", "release", "extend", "is-locked", "lookup", "do", ...
	Detail string // a human-readable detail, free of raw keys and lock ids; may be empty
	Err    error  // the native cause; may be nil
}

// Error formats the error as "idemkit: <op>: <Code>: <detail>: <cause>".
func (e *Error) Error() string {
	s := "idemkit: "
	if e.Op != "" {
		s += e.Op + ": "
	}
	s += e.Code.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the code's sentinel and the cause, so errors.Is and
// errors.As see both.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if s := e.Code.Sentinel(); s != nil {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// NewError returns an *Error. Backends use it to report failures; detail must
// not contain raw keys or lock ids.
func NewError(code Code, op, detail string, cause error) *Error {
	return &Error{Code: code, Op: op, Detail: detail, Err: cause}
}

// CodeOf returns the code of the first [*Error] in err's tree. For an error
// without one it maps context.Canceled to CodeAborted and
// context.DeadlineExceeded to CodeNetworkTimeout, and returns CodeUnknown for
// anything else, including nil.
func CodeOf(err error) Code {
	if err == nil {
		return CodeUnknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return CodeAborted
	case errors.Is(err, context.DeadlineExceeded):
		return CodeNetworkTimeout
	}
	return CodeUnknown
}

// CheckContext returns nil while ctx is live; once ctx has ended, an
// [*Error] wrapping ctx.Err(): Aborted when ctx was cancelled,
// NetworkTimeout when its deadline passed. Backends call it before
// dispatching any I/O.
//
// When ctx was cancelled with a cause (context.WithCancelCause), the error
// wraps both ctx.Err() and the cause.
func CheckContext(ctx context.Context, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	code, detail := CodeAborted, "context canceled"
	if errors.Is(err, context.DeadlineExceeded) {
		code, detail = CodeNetworkTimeout, "context deadline exceeded"
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return NewError(code, op, detail, err)
}
