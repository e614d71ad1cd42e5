// Package wire holds the primitives of the length-prefixed binary formats
// the adapters record responses in (nethttp's and grpcinterceptor's):
// unsigned varints in their shortest form, and strings and byte fields
// prefixed with their length. Decoding never panics; every reader reports
// malformed input with ok == false.
package wire

import "encoding/binary"

// AppendString appends s prefixed with its length as a varint.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Uvarint reads a varint from the front of b and returns it and the rest.
// Only the shortest encoding of a value is accepted, so that one value has
// one encoding.
func Uvarint(b []byte) (v uint64, rest []byte, ok bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n > 1 && b[n-1] == 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// Field reads a length-prefixed field from the front of b and returns it
// (aliasing b) and the rest.
func Field(b []byte) (field, rest []byte, ok bool) {
	n, b, ok := Uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, nil, false
	}
	return b[:n], b[n:], true
}
