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
// answers itself, stable for clients to match on; docs/grpc.md says when
// each is sent.
const (
	reasonKeyMissing          = "IDEMPOTENCY_KEY_MISSING"
	reasonKeyMalformed        = "IDEMPOTENCY_KEY_MALFORMED"
	reasonKeyReused           = "IDEMPOTENCY_KEY_REUSED"
	reasonCredentialsMismatch = "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH"
	reasonInProgress          = "IDEMPOTENCY_KEY_IN_PROGRESS"
	reasonNotReplayable       = "IDEMPOTENCY_NOT_REPLAYABLE"
	reasonUnavailable         = "IDEMPOTENCY_UNAVAILABLE"
	reasonMisconfigured       = "IDEMPOTENCY_MISCONFIGURED"
	reasonRecordUnreadable    = "IDEMPOTENCY_RECORD_UNREADABLE"
	reasonTransactionFailed   = "IDEMPOTENCY_TRANSACTION_FAILED"
	reasonTransactionConflict = "IDEMPOTENCY_TRANSACTION_CONFLICT"
	reasonResponseTooLarge    = "IDEMPOTENCY_RESPONSE_TOO_LARGE"
)

// ErrorInfo metadata entries of the key statuses: the metadata key read,
// and the request field read (for a method whose request has it).
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
