package fingerprint

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// jsonFingerprint returns the "json-v2" fingerprint of the JSON text data:
// the SHA-256 of its canonical form.
func jsonFingerprint(data []byte) (Fingerprint, error) {
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

// Value returns the "json-v2" fingerprint of any Go value: the SHA-256 of
// the canonical form of its encoding/json encoding, so field and map order
// do not matter while every encoded field does. A value json.Marshal
// refuses, or whose JSON the canonical form refuses (a marshaler writing
// duplicate names), is an error.
func Value(v any) (Fingerprint, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint: encoding value: %w", err)
	}
	return jsonFingerprint(data)
}
