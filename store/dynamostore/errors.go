package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemkit/idemkit"
)

// mapError turns an error of the DynamoDB client into a [*idemkit.Error]
// for op that unwraps to its code's sentinel and err (nil and
// *idemkit.Error values pass). An ended ctx gives Aborted or
// NetworkTimeout, whatever the client made of it. Native errors are told
// apart by their type or their API error code, never by message text.
func mapError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var ie *idemkit.Error
	if errors.As(err, &ie) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return idemkit.NewError(idemkit.CodeOf(cerr), op, cerr.Error(), err)
	}
	code, detail := classify(err)
	return idemkit.NewError(code, op, detail, err)
}

// classify returns the code and a detail for a native error.
func classify(err error) (idemkit.Code, string) {
	var (
		notFound   *types.ResourceNotFoundException
		throughput *types.ProvisionedThroughputExceededException
		limit      *types.RequestLimitExceeded
		internal   *types.InternalServerError
		quota      ratelimit.QuotaExceededError
		ne         net.Error
		api        smithy.APIError
	)
	switch {
	case errors.Is(err, context.Canceled):
		return idemkit.CodeAborted, "context canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return idemkit.CodeNetworkTimeout, "context deadline exceeded"
	case errors.As(err, &notFound):
		return idemkit.CodeMisconfigured, "the table (or its lock-id index) does not exist: create it with CreateTable or as docs/backends.md shows, or name yours with WithTable"
	case errors.As(err, &throughput), errors.As(err, &limit):
		return idemkit.CodeRateLimited, "DynamoDB refused the request for throughput or account limits"
	case errors.As(err, &internal):
		return idemkit.CodeServiceUnavailable, "DynamoDB reported an internal error"
	case errors.As(err, &ne) && ne.Timeout():
		return idemkit.CodeNetworkTimeout, "timed out talking to DynamoDB"
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return idemkit.CodeServiceUnavailable, "DynamoDB is unreachable"
	case errors.As(err, &quota):
		// The SDK's retry quota runs out when requests keep failing; the
		// cause it wraps, when it has one, was classified above.
		return idemkit.CodeServiceUnavailable, "DynamoDB is failing: the client's retry quota is spent"
	case errors.As(err, &api):
		return classifyCode(api.ErrorCode(), api.ErrorFault())
	}
	return idemkit.CodeInternal, "unexpected error from the DynamoDB client"
}

// classifyCode maps the API error codes the SDK has no type for.
func classifyCode(code string, fault smithy.ErrorFault) (idemkit.Code, string) {
	switch code {
	case "ThrottlingException":
		return idemkit.CodeRateLimited, "DynamoDB throttled the request"
	case "AccessDeniedException":
		return idemkit.CodeAuthFailed, "access denied: the role needs dynamodb:GetItem, PutItem, UpdateItem and Query on the table and its lock-id index (Scan to list)"
	case "UnrecognizedClientException", "InvalidSignatureException", "MissingAuthenticationTokenException", "ExpiredTokenException":
		return idemkit.CodeAuthFailed, "the credentials were refused"
	case "ValidationException", "SerializationException":
		return idemkit.CodeInvalidArgument, "DynamoDB refused the request as invalid (does the table's key schema match docs/backends.md?)"
	case "ServiceUnavailable", "InternalFailure":
		return idemkit.CodeServiceUnavailable, "DynamoDB is unavailable"
	}
	if fault == smithy.FaultServer {
		return idemkit.CodeServiceUnavailable, "DynamoDB failed the request (" + code + ")"
	}
	return idemkit.CodeInternal, "unexpected error " + code + " from DynamoDB"
}

// conditionFailed reports whether err is a refused condition, and returns
// the item DynamoDB sent with it (nil when it sent none: an emulator
// without ReturnValuesOnConditionCheckFailure).
func conditionFailed(err error) (bool, map[string]types.AttributeValue) {
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return true, cf.Item
	}
	return false, nil
}

// malformed is the error for an item this package did not write; the
// detail names the attribute, never a key.
func malformed(op, what string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "malformed record item: "+what, nil)
}

// contention is the error of a claim whose conditional writes kept losing.
func contention(op string) error {
	return idemkit.NewError(idemkit.CodeServiceUnavailable, op,
		fmt.Sprintf("the record item kept changing under %d conditional writes", maxAttempts), nil)
}
