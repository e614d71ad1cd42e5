package grpcinterceptor

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idemkit/middleware"
)

// Key errors. A *keyError matches one of them with errors.Is, and
// middleware.ErrInvalidKey too, as the key errors of every idemkit adapter
// do.
var (
	// errKeyMissing: the call has no idempotency key where one is
	// required.
	errKeyMissing = errors.New("grpcinterceptor: idempotency key missing")
	// errKeyMalformed: the key metadata is empty, too long, repeated, or
	// has characters a key cannot have.
	errKeyMalformed = errors.New("grpcinterceptor: idempotency key malformed")
)

// keyError says what is wrong with the key metadata: reason is the detail
// of the InvalidArgument answer. Its message never repeats the key.
type keyError struct {
	reason string
	err    error
}

func (e *keyError) Error() string { return e.err.Error() + ": " + e.reason }

// Unwrap returns errKeyMissing or errKeyMalformed, and
// middleware.ErrInvalidKey.
func (e *keyError) Unwrap() []error { return []error{e.err, middleware.ErrInvalidKey} }

func malformed(format string, args ...any) error {
	return &keyError{reason: fmt.Sprintf(format, args...), err: errKeyMalformed}
}

// parseKey checks the values of the key metadata entry (all of them, as
// metadata.MD holds them) and returns the key.
//
// A key is exactly one value of 1 to maxLen (maxLen <= 0: no limit)
// visible ASCII characters (0x21 to 0x7e) other than ','. The key is taken
// literally and is case-sensitive: unlike the HTTP header, gRPC metadata
// has no quoted form, so quotes are part of the key.
//
// Refused with a *keyError matching errKeyMalformed: an empty value, a
// value that is too long, a space, a control or non-ASCII character, a
// comma (a list, as a proxy that joins repeated values would make it), and
// more than one value. No value at all is errKeyMissing.
func parseKey(values []string, maxLen int) (string, error) {
	switch len(values) {
	case 0:
		return "", &keyError{reason: "no idempotency key", err: errKeyMissing}
	case 1:
	default:
		return "", malformed("the key appears %d times; send it once", len(values))
	}
	key := values[0]
	if key == "" {
		return "", malformed("the key is empty")
	}
	if maxLen > 0 && len(key) > maxLen {
		return "", malformed("the key has %d characters; at most %d are allowed", len(key), maxLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= 0x20 || c >= 0x7f || c == ',' {
			return "", malformed("character %s at position %d is not allowed in a key", describe(c), i)
		}
	}
	return key, nil
}

func describe(c byte) string {
	switch {
	case c == ',':
		return "',' (a list)"
	case c == ' ':
		return "' ' (a space)"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("0x%02x (a control character)", c)
	case c >= 0x80:
		return fmt.Sprintf("0x%02x (not ASCII)", c)
	}
	return strconv.QuoteRune(rune(c))
}

// keyFieldOf returns req's message and its key field (see WithKeyField): a
// singular string field named name. fd is nil when name is empty, req is
// not a protobuf message, or its message has no such field: then the field
// is not a key source for req's method. A nil message (a typed nil
// pointer) has none either: nothing can be read from it or set in it.
func keyFieldOf(name protoreflect.Name, req any) (m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if name == "" {
		return nil, nil
	}
	pm, ok := req.(proto.Message)
	if !ok {
		return nil, nil
	}
	m = pm.ProtoReflect()
	if !m.IsValid() {
		return nil, nil
	}
	fd = m.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return nil, nil
	}
	return m, fd
}
