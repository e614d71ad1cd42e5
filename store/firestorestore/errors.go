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
// [*idemkit.Error] for op that unwraps to its code's sentinel and err (nil
// and *idemkit.Error values pass). An ended ctx gives Aborted or
// NetworkTimeout, whatever the client made of it. The cause prints only
// its status code ([redact]).
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

// mapCommitError is [mapError] for a commit that a read has shown did not
// land. The client retries a commit whose answer was lost, and the retry
// meets what the first try left, so InvalidArgument, FailedPrecondition,
// NotFound and AlreadyExists mean "outcome unknown", never a configuration
// error: ServiceUnavailable.
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

// contended reports whether err, a conditional commit's, says the document
// changed since it was read (or was the retry of a commit whose answer was
// lost: a read settles which).
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
// quote a document name and so a key; it unwraps to the original.
type rpcError struct {
	err  error
	code codes.Code
}

func (e *rpcError) Error() string              { return "rpc error: code = " + e.code.String() }
func (e *rpcError) Unwrap() error              { return e.err }
func (e *rpcError) GRPCStatus() *status.Status { s, _ := status.FromError(e.err); return s }

// redact wraps a gRPC status error in an rpcError.
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
// losing.
func contention(op string) error {
	return idemkit.NewError(idemkit.CodeServiceUnavailable, op,
		fmt.Sprintf("the record document kept changing under %d conditional writes", maxAttempts), nil)
}

// malformed is the error for a record document this package did not
// write; the detail names the field, never a key.
func malformed(op, what string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "malformed record document: "+what, nil)
}

// tooLargeRefused is the error of a large record document's write that
// Firestore refused as invalid and a read shows did not land.
func tooLargeRefused(ctx context.Context, op string, size int, err error) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op,
		fmt.Sprintf("Firestore refused a %d-byte record document (its document limit is %d bytes)", size, maxDocumentBytes),
		fmt.Errorf("%w: %w", store.ErrTooLarge, mapError(ctx, op, err)))
}
