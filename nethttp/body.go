package nethttp

import (
	"errors"
	"fmt"
	"io"
	"math"
)

// errBodyTooLarge is what readLimited returns for a body over its limit.
var errBodyTooLarge = errors.New("nethttp: request body too large")

// readLimited reads r to its end; with limit > 0 it asks for at most
// limit+1 bytes and refuses a longer body with errBodyTooLarge. size (a
// Content-Length, negative if unknown) only sizes the buffer: a wrong
// hint changes nothing but the allocations. Other read errors are
// returned wrapped, with no data. A nil r reads as empty.
func readLimited(r io.Reader, limit, size int64) ([]byte, error) {
	if r == nil {
		return []byte{}, nil
	}
	if limit <= 0 || limit == math.MaxInt64 {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("nethttp: reading request body: %w", err)
		}
		return b, nil
	}
	want := limit + 1 // the most we ever ask r for
	start := int64(512)
	if size >= 0 {
		start = size + 1 // room for the read that finds the end
	}
	b := make([]byte, 0, min(want, start))
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append pick the growth
		}
		room := b[len(b):cap(b)]
		if rest := want - int64(len(b)); int64(len(room)) > rest {
			room = room[:rest]
		}
		n, err := r.Read(room)
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("nethttp: reading request body: %w", err)
		}
	}
}
