package grpcinterceptor

// Internals the external tests reach.
var (
	DefaultSelector    = defaultSelector
	DeclaredIdempotent = declaredIdempotent
	Fingerprint        = protoFingerprint
	RetryDelayOf       = retryDelayOf
)

const AlgProto = algProto
