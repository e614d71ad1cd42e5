package grpcinterceptor

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/idemkit/idemkit/fingerprint"
	"google.golang.org/protobuf/proto"
)

// algProto names the fingerprints of protoFingerprint.
const algProto = "grpc-v1"

// fpBuffers pools the marshalling buffers of protoFingerprint. Buffers that grew
// past maxPooledBuffer are left to the garbage collector.
var fpBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuffer = 256 << 10

// protoFingerprint returns the "grpc-v1" fingerprint of a call (see
// WithFingerprint): unknown fields are kept, so a request with fields this
// server does not know still matches its faithful retries.
func protoFingerprint(fullMethod string, req any) (fingerprint.Fingerprint, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return fingerprint.Fingerprint{}, fmt.Errorf("grpcinterceptor: cannot fingerprint a %T: not a protobuf message", req)
	}
	bp := fpBuffers.Get().(*[]byte)
	b := binary.AppendUvarint((*bp)[:0], uint64(len(fullMethod)))
	b = append(b, fullMethod...)
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
	if err != nil {
		return fingerprint.Fingerprint{}, fmt.Errorf("grpcinterceptor: cannot fingerprint the request: %w", err)
	}
	sum := sha256.Sum256(b)
	if cap(b) <= maxPooledBuffer {
		*bp = b
		fpBuffers.Put(bp)
	}
	return fingerprint.New(algProto, sum), nil
}
