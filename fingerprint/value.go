package fingerprint

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// JSON returns the "json-v2" fingerprint of the JSON text data: the SHA-256
// of its [CanonicalJSON] form, so that member order, whitespace, escapes and
// number spelling do not matter. Input CanonicalJSON refuses is an error
// matching [ErrInvalidJSON].
func JSON(data []byte) (Fingerprint, error) {
	st := getState()
	out, err := st.c.appendCanonical(st.buf[:0], data)
	st.buf = out[:0]
	if err != nil {
		putState(st)
		return Fingerprint{}, err
	}
	sum := sha256.Sum256(out)
	putState(st)
	return Fingerprint{alg: algJSON, sum: sum}, nil
}

// Value returns the "json-v2" fingerprint of any Go value: v is encoded with
// [encoding/json.Marshal] and fingerprinted with [JSON], so struct field
// order and map iteration order do not matter, while every encoded field
// does (json tags, omitempty and custom marshalers apply as usual). Two
// values with the same JSON encoding have the same fingerprint, whatever
// their Go types.
//
// A value json.Marshal refuses (a channel, a function, NaN) is an error that
// wraps json.Marshal's error; JSON that [CanonicalJSON] refuses (a custom
// marshaler writing duplicate names, nesting deeper than 1000 levels) is an
// error matching [ErrInvalidJSON].
func Value(v any) (Fingerprint, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint: encoding value: %w", err)
	}
	return JSON(data)
}
