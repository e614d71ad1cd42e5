package firestorelock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/idemkit/idemkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mapError turns an error from the Firestore client into a [*idemkit.Error]
// for op that unwraps to both its code's sentinel and err. It returns nil
// for nil and a *idemkit.Error unchanged. When ctx has ended, the error is
// Aborted (cancelled) or NetworkTimeout (deadline), whatever the client
// made of the interruption, and unwraps to ctx's error as well. Otherwise
// the code comes from the gRPC status code (status.Code), or from the
// error's type, never from message text:
//
//	context.Canceled / DeadlineExceeded in err          Aborted / NetworkTimeout
//	Unavailable                                         ServiceUnavailable
//	Canceled (the client was closed)                    ServiceUnavailable
//	Aborted (contention that outlasted the retries)     ServiceUnavailable
//	Internal (the service's own failure; Google advises a retry)  ServiceUnavailable
//	DeadlineExceeded                                    NetworkTimeout
//	ResourceExhausted (quota, rate)                     RateLimited
//	PermissionDenied, Unauthenticated                   AuthFailed
//	InvalidArgument, OutOfRange                         InvalidArgument
//	FailedPrecondition (an index missing or disabled,
//	  a database in Datastore mode)                     InvalidArgument
//	NotFound (the database does not exist)              InvalidArgument
//	AlreadyExists, Unimplemented, DataLoss, Unknown     Internal
//	net.Error with Timeout()                            NetworkTimeout
//	other net errors, io.EOF, refused or reset connections  ServiceUnavailable
//	anything else                                       Internal
//
// Aborted is what the client reports when contention on a transaction's
// documents outlasted its retries ([firestore.DefaultTransactionMaxAttempts]
// attempts). Contention is a result, not a failure, wherever the caller can
// answer with one: the operations of [Locker] call mapError for every
// failure except those. An acquire whose write-only commit or replacement
// transaction meets contention (Aborted, AlreadyExists, or
// FailedPrecondition on its own preconditions) answers "locked", which
// [lock.Do] retries; a release or extend whose conditional write finds the
// document changed reads it again; NotFound of a document read is absence.
// Where mapError does see Aborted, it gives ServiceUnavailable: transient,
// so the callers' retry paths ([lock.WithRetryTransient]) try again.
// A commit's error, whose outcome is unknown until a read settles it, goes
// through [mapCommitError] instead.
//
// A gRPC status message can quote a document name, and document names hold
// keys, so the cause kept in the returned error prints only its status
// code; the original error, message included, stays reachable through
// errors.As, errors.Is and status.FromError.
func mapError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var le *idemkit.Error
	if errors.As(err, &le) {
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

// mapCommitError is [mapError] for the error of a commit whose outcome a
// read has settled: the read found that the commit did not take effect.
// The Firestore client retries a commit whose answer was lost
// (Unavailable), and the retry meets the state its first try left: outside
// a transaction its own precondition fails (FailedPrecondition, NotFound,
// AlreadyExists), and inside one the transaction has ended
// (InvalidArgument, "the transaction is invalid or closed"), whether or
// not the first try landed. So on a commit those codes mean "outcome
// unknown", never a configuration error: once a read shows the commit did
// not land, they are ServiceUnavailable (transient: the callers' retry
// paths try again). Every other error maps as mapError maps it, and so
// does any error once ctx has ended.
func mapCommitError(ctx context.Context, op string, err error) error {
	mapped := mapError(ctx, op, err)
	if ctx.Err() != nil || err == nil {
		return mapped
	}
	var le *idemkit.Error
	if errors.As(err, &le) {
		return mapped
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists:
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op,
			"Firestore refused a commit that a read shows did not take effect (a retried commit whose first answer was lost?)", redact(err))
	}
	return mapped
}

// classify returns the code and a detail for a native error (see
// [mapError]).
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

// classifyStatus maps a gRPC status code (see [mapError]).
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
		return idemkit.CodeRateLimited, "quota or rate limit exhausted"
	case codes.PermissionDenied:
		return idemkit.CodeAuthFailed, "permission denied"
	case codes.Unauthenticated:
		return idemkit.CodeAuthFailed, "the credentials were refused"
	case codes.InvalidArgument, codes.OutOfRange:
		return idemkit.CodeInvalidArgument, "Firestore refused the request as invalid"
	case codes.FailedPrecondition:
		return idemkit.CodeInvalidArgument, "the database is not ready for this request (a single-field index on " +
			fieldLockID + " or " + fieldExpireAt + " missing or disabled? a database in Datastore mode?)"
	case codes.NotFound:
		return idemkit.CodeInvalidArgument, "not found (does the database exist?)"
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

// isContention reports whether err, the error of a commit, is Firestore's
// answer to contention: Aborted (a transaction whose retries ran out, or a
// commit that lost to a concurrent one), AlreadyExists (a Create met a
// document that another writer created first) or FailedPrecondition (an
// update-time or existence precondition no longer held). Only a commit's
// error means that: a query answers FailedPrecondition for a missing
// index. The locker answers such an acquire "locked".
func isContention(err error) bool {
	switch status.Code(err) {
	case codes.Aborted, codes.AlreadyExists, codes.FailedPrecondition:
		return true
	}
	return false
}

// changed reports whether a conditional write failed because its document
// changed (or went away) since it was read.
func changed(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists:
		return true
	}
	return false
}
