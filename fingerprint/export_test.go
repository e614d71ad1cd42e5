package fingerprint

// The canonical form and its errors, for the tests.
type SyntaxError = syntaxError

var (
	ErrInvalidJSON = errInvalidJSON
	JSON           = jsonFingerprint
)

// CanonicalJSON returns the canonical form of the JSON text data, a new
// slice.
func CanonicalJSON(data []byte) ([]byte, error) {
	st := getState()
	out, err := st.c.appendCanonical(st.buf[:0], data)
	st.buf = out[:0]
	if err != nil {
		putState(st)
		return nil, err
	}
	res := make([]byte, len(out))
	copy(res, out)
	putState(st)
	return res, nil
}
