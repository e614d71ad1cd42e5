package grpcinterceptor

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idemkit/middleware"
)

// Key errors; a *keyError matches one of them and middleware.ErrInvalidKey.
var (
	errKeyMissing   = errors.New("grpcinterceptor: idempotency key missing")
	errKeyMalformed = errors.New("grpcinterceptor: idempotency key malformed")
)

// keyError says what is wrong with the key metadata: reason is the detail
// of the InvalidArgument answer. Its message never repeats the key.
type keyError struct {
	reason string
	err    error
}

func (e *keyError) Error() string { return e.err.Error() + ": " + e.reason }

func (e *keyError) Unwrap() []error { return []error{e.err, middleware.ErrInvalidKey} }

func malformed(format string, args ...any) error {
	return &keyError{reason: fmt.Sprintf(format, args...), err: errKeyMalformed}
}

// parseKey returns the key of the metadata values: exactly one value of 1
// to maxLen (<= 0: no limit) visible ASCII characters other than ',' (a
// list, as a joining proxy makes it), taken literally: metadata has no
// quoted form. A refusal is a *keyError.
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

// keyFieldOf returns req's message and its key field, a singular string
// field named name; fd is nil when there is none (or req is a typed nil),
// and the field is then not a key source for req's method.
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
