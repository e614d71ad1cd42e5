package grpcinterceptor

import (
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Reasons: the google.rpc.ErrorInfo reason of each status the interceptor
// answers itself, in the domain set by [WithErrorDomain] (default
// "idemkit.dev"). They are stable: clients may match on them. The
// ErrorInfo of the key statuses carries the metadata key the server reads
// under "metadata_key" and, for a method whose request has the key field
// ([WithKeyField]), the field's name under "key_field".
const (
	// reasonKeyMissing: InvalidArgument; the method is guarded, the key is
	// required and the call has none (neither in the metadata nor in the
	// request's key field, see [WithKeyField]).
	reasonKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	// reasonKeyMalformed: InvalidArgument; the key is empty, too long
	// (alone, or with its scope: see middleware.Scope), sent more than
	// once or has characters a key cannot have. A key from the request's
	// key field ([WithKeyField]) comes with a google.rpc.BadRequest naming
	// the field too.
	reasonKeyMalformed = "IDEMPOTENCY_KEY_MALFORMED"
	// reasonKeyReused: FailedPrecondition; the key was used for a call
	// with another request. Retrying cannot help: use a new key.
	reasonKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// reasonCredentialsMismatch: FailedPrecondition; no scope hook is set
	// and the key was used by a call with other authorization metadata
	// (or with none, or this call has none). The recorded answer is never
	// sent to this call, and the handler does not run. Use a new key.
	reasonCredentialsMismatch = "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH"
	// reasonInProgress: Aborted with RetryInfo; the first call with the
	// key is still running. Retry later with the same key and request.
	reasonInProgress = "IDEMPOTENCY_KEY_IN_PROGRESS"
	// reasonNotReplayable: FailedPrecondition; the call with this key ran,
	// but its response was too large to keep. It will never run again
	// under this key.
	reasonNotReplayable = "IDEMPOTENCY_NOT_REPLAYABLE"
	// reasonUnavailable: Unavailable with RetryInfo; the idempotency
	// backend cannot be reached, so the call was not run. Retry later with
	// the same key.
	reasonUnavailable = "IDEMPOTENCY_UNAVAILABLE"
	// reasonMisconfigured: Internal, without RetryInfo; the idempotency
	// backend refuses the service until an operator fixes its setup (a
	// missing table, refused credentials or permissions), so the call was
	// not run. Retrying cannot help; the server's log says what is wrong.
	reasonMisconfigured = "IDEMPOTENCY_MISCONFIGURED"
	// reasonRecordUnreadable: Unavailable with RetryInfo; the call ran
	// before, but its record cannot be read or rebuilt here (its message
	// type is not linked into this server, its response was sealed with a
	// key this server lacks, or the record is damaged). It is not run
	// again, even with WithFailOpen.
	reasonRecordUnreadable = "IDEMPOTENCY_RECORD_UNREADABLE"
	// reasonTransactionFailed: Internal; the handler's own transaction
	// (pgstore.Tx) failed at its commit (a statement it let fail, a
	// deferred constraint) and was rolled back: nothing of the call was
	// kept, and a retry runs the handler again.
	reasonTransactionFailed = "IDEMPOTENCY_TRANSACTION_FAILED"
	// reasonTransactionConflict: Aborted with RetryInfo; the handler's own
	// transaction lost a conflict with a concurrent one (a serialization
	// failure, a deadlock) and was rolled back. Retry with the same key
	// and request: the handler runs again.
	reasonTransactionConflict = "IDEMPOTENCY_TRANSACTION_CONFLICT"
	// reasonResponseTooLarge: Internal; the handler began its transaction
	// and returned a response larger than [WithMaxResponseBytes], which a
	// commit cannot record: the transaction was rolled back, as it is for
	// an HTTP response too large to hold until the commit.
	reasonResponseTooLarge = "IDEMPOTENCY_RESPONSE_TOO_LARGE"
)

// ErrorInfo metadata entries of the key statuses: the metadata key the
// interceptor reads, and the request field it reads the key from (see
// WithKeyField; only for a method whose request has that field).
const (
	errorInfoMetadataKey = "metadata_key"
	errorInfoFieldKey    = "key_field"
)

// refusal builds a status with an ErrorInfo detail, a RetryInfo detail
// when retryAfter > 0, and the extra details.
func (s *server) refusal(code codes.Code, reason, msg string, retryAfter time.Duration, meta map[string]string, extra ...protoadapt.MessageV1) error {
	details := make([]protoadapt.MessageV1, 0, 2+len(extra))
	details = append(details, &errdetails.ErrorInfo{Reason: reason, Domain: s.cfg.domain, Metadata: meta})
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	details = append(details, extra...)
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		// Only a detail that cannot be marshalled fails; these can.
		return status.Error(code, msg)
	}
	return st.Err()
}

// ErrorInfoOf returns the google.rpc.ErrorInfo detail of err's status, or
// nil when it has none.
func ErrorInfoOf(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// retryDelayOf returns the delay of the google.rpc.RetryInfo detail of
// err's status, and whether it has one.
func retryDelayOf(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0, false
			}
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// hasRetryInfo reports whether st carries a google.rpc.RetryInfo detail:
// the server asks the client to call again (see StorePolicy.TryAgain). It
// reads the details' type URLs, without decoding them.
func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Proto().GetDetails() {
		if strings.HasSuffix(d.GetTypeUrl(), "/google.rpc.RetryInfo") {
			return true
		}
	}
	return false
}
