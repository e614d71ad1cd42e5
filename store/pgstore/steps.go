package pgstore

import (
	"encoding/binary"
	"errors"

	"github.com/idemkit/idemkit/store"
)

// The steps column holds a claim's steps (NULL: none): one byte, their
// number (at most store.MaxSteps), then each step as the uvarint length of
// its name, the name, the uvarint length of its result and the result.
// RecordStep's UPDATE reads and rewrites only the first byte and appends
// one encoded step, so the server never decodes them.

// encodeStep returns step as RecordStep appends it to the steps column.
func encodeStep(step store.Step) []byte {
	b := make([]byte, 0, 2*binary.MaxVarintLen32+step.Size())
	b = binary.AppendUvarint(b, uint64(len(step.Name)))
	b = append(b, step.Name...)
	b = binary.AppendUvarint(b, uint64(len(step.Result)))
	return append(b, step.Result...)
}

var errBadSteps = errors.New("malformed steps column")

// decodeSteps decodes the steps column. Each result is a part of b, capped
// so that appending to it cannot reach the next step.
func decodeSteps(b []byte) ([]store.Step, error) {
	if len(b) == 0 {
		return nil, errBadSteps
	}
	n := int(b[0])
	if n > store.MaxSteps {
		return nil, errBadSteps
	}
	b = b[1:]
	steps := make([]store.Step, 0, n)
	for range n {
		name, rest, ok := chunk(b)
		if !ok {
			return nil, errBadSteps
		}
		result, rest, ok := chunk(rest)
		if !ok {
			return nil, errBadSteps
		}
		steps = append(steps, store.Step{Name: string(name), Result: result})
		b = rest
	}
	if len(b) != 0 {
		return nil, errBadSteps
	}
	return steps, nil
}

// chunk splits b after a uvarint length and that many bytes.
func chunk(b []byte) (part, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, false
	}
	end := n + int(l)
	return b[n:end:end], b[end:], true
}
