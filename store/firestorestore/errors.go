package firestorestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// mapError turns an error from the Firestore client into a
// [*idemkit.Error] for op that unwraps to both its code's sentinel and err
// (see the package documentation for the table). It returns nil for nil
// and an *idemkit.Error unchanged. When ctx has ended, the error is
// Aborted (cancelled) or NetworkTimeout (deadline), whatever the client
// made of the interruption.
//
// A gRPC status message can quote a document name, and document names hold
// keys, so the cause kept in the returned error prints only its status
// code; the original error, message included, stays reachable through
// errors.As, errors.Is and status.FromError.
func mapError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var ie *idemkit.Error
	if errors.As(err, &ie) {
		return err
	}
	err = redact(err)
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return idemkit.NewError(idemkit.CodeOf(cerr), op, cerr.Error(), err)
	}
	code, detail := classify(err)
	return idemkit.NewError(code, op, detail, err)
}

// mapCommitError is [mapError] for the error of a commit that a read has
// shown not to have taken effect. The Firestore client retries a commit
// whose answer was lost, and the retry meets what the first try left, so
// on a commit InvalidArgument, FailedPrecondition, NotFound and
// AlreadyExists mean "outcome unknown", never a configuration error: once a
// read shows the commit did not land they are ServiceUnavailable
// (transient).
func mapCommitError(ctx context.Context, op string, err error) error {
	mapped := mapError(ctx, op, err)
	var ie *idemkit.Error
	if ctx.Err() != nil || err == nil || errors.As(err, &ie) {
		return mapped
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists:
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op,
			"Firestore refused a write that a read shows did not take effect (a retried write whose first answer was lost?)", redact(err))
	}
	return mapped
}

// contended reports whether err, the error of a conditional commit, says
// that the document changed since it was read: AlreadyExists (a Create met
// a document), FailedPrecondition (the update time moved), NotFound (the
// document went away) or Aborted. The write did not take effect, unless it
// was the client's retry of a write whose answer was lost; either way a
// read settles it.
func contended(err error) bool {
	switch status.Code(err) {
	case codes.AlreadyExists, codes.FailedPrecondition, codes.NotFound, codes.Aborted:
		return true
	}
	return false
}

// classify returns the code and a detail for a native error.
func classify(err error) (idemkit.Code, string) {
	switch {
	case errors.Is(err, context.Canceled):
		return idemkit.CodeAborted, "context canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return idemkit.CodeNetworkTimeout, "context deadline exceeded"
	}
	if s, ok := status.FromError(err); ok {
		return classifyStatus(s.Code())
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return idemkit.CodeNetworkTimeout, "timed out talking to Firestore"
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return idemkit.CodeServiceUnavailable, "Firestore is unreachable"
	}
	return idemkit.CodeInternal, "unexpected error from the Firestore client"
}

// classifyStatus maps a gRPC status code.
func classifyStatus(c codes.Code) (idemkit.Code, string) {
	switch c {
	case codes.Unavailable:
		return idemkit.CodeServiceUnavailable, "Firestore is unavailable"
	case codes.Canceled:
		return idemkit.CodeServiceUnavailable, "the call was cancelled (is the client closed?)"
	case codes.Aborted:
		return idemkit.CodeServiceUnavailable, "contention on the document outlasted the retries"
	case codes.Internal:
		return idemkit.CodeServiceUnavailable, "Firestore reported an internal error"
	case codes.DeadlineExceeded:
		return idemkit.CodeNetworkTimeout, "Firestore did not answer in time"
	case codes.ResourceExhausted:
		return idemkit.CodeRateLimited, "Firestore's quota or rate limit is exhausted"
	case codes.PermissionDenied:
		return idemkit.CodeAuthFailed, "permission denied: the service account needs read and write access to the database's documents (roles/datastore.user)"
	case codes.Unauthenticated:
		return idemkit.CodeAuthFailed, "the credentials were refused"
	case codes.InvalidArgument, codes.OutOfRange:
		return idemkit.CodeInvalidArgument, "Firestore refused the request as invalid"
	case codes.FailedPrecondition:
		return idemkit.CodeMisconfigured, "the database is not ready for this request (the single-field index on " +
			fieldExpireAt + " missing or disabled? a database in Datastore mode?)"
	case codes.NotFound:
		return idemkit.CodeMisconfigured, "not found: create the database (or name an existing one)"
	}
	return idemkit.CodeInternal, "unexpected status " + c.String() + " from Firestore"
}

// rpcError stands for a gRPC status error without its message, which can
// quote a document name and so a key. It unwraps to the original error and
// reports the original status.
type rpcError struct {
	err  error
	code codes.Code
}

func (e *rpcError) Error() string              { return "rpc error: code = " + e.code.String() }
func (e *rpcError) Unwrap() error              { return e.err }
func (e *rpcError) GRPCStatus() *status.Status { s, _ := status.FromError(e.err); return s }

// redact wraps a gRPC status error in an rpcError; other errors are
// returned as they are.
func redact(err error) error {
	var r *rpcError
	if errors.As(err, &r) {
		return err
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK {
		return &rpcError{err: err, code: s.Code()}
	}
	return err
}

// contention is the error of an operation whose conditional writes kept
// meeting concurrent writes to the document.
func contention(op string) error {
	return idemkit.NewError(idemkit.CodeServiceUnavailable, op,
		fmt.Sprintf("the record document kept changing under %d conditional writes", maxAttempts), nil)
}

// malformed is the error for a record document this package did not
// write as it reads it. The detail names the field, never a key.
func malformed(op, what string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "malformed record document: "+what, nil)
}

// tooLargeRefused is the error of a write of a large record document that
// Firestore refused as invalid and that a read shows did not land:
// Firestore counted the document over its limit.
func tooLargeRefused(ctx context.Context, op string, size int, err error) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op,
		fmt.Sprintf("Firestore refused a %d-byte record document (its document limit is %d bytes)", size, maxDocumentBytes),
		fmt.Errorf("%w: %w", store.ErrTooLarge, mapError(ctx, op, err)))
}
