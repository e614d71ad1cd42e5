package nethttp

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"

	"github.com/idemkit/idemkit/internal/wire"
)

// response is a recorded HTTP response: what a replay writes.
type response struct {
	Status int
	Header http.Header // the replayable headers only
	Body   []byte
}

// errCorrupt is returned by decodeInto for bytes encodeResponse did not
// produce.
var errCorrupt = errors.New("nethttp: recorded response is corrupt")

const encodingVersion = 1

// maxHeaderEntries bounds what a decoder accepts, so corrupt input cannot
// make it allocate without limit.
const maxHeaderEntries = 1 << 12

// encodeResponse encodes r for the record: a version byte, the status, the
// headers (sorted by name, values in order) and the body.
func encodeResponse(r response) []byte {
	return append(appendHead(nil, r.Status, r.Header, nil, len(r.Body)), r.Body...)
}

// maxStackNames is how many header names appendHead sorts without
// allocating.
const maxStackNames = 16

// appendHead appends encodeResponse's encoding up to the body, with the
// headers keep selects (all if nil), and room more bytes of capacity.
func appendHead(b []byte, status int, h http.Header, keep func(name string) bool, room int) []byte {
	var stack [maxStackNames]string
	names := stack[:0]
	size := 1 + 2 + room
	for name, values := range h {
		if keep != nil && !keep(name) {
			continue
		}
		names = append(names, name)
		size += uvarintLen(len(name)) + len(name) + uvarintLen(len(values))
		for _, v := range values {
			size += uvarintLen(len(v)) + len(v)
		}
	}
	size += uvarintLen(len(names))
	slices.Sort(names)
	b = slices.Grow(b, size)
	b = append(b, encodingVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = wire.AppendString(b, name)
		values := h[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = wire.AppendString(b, v)
		}
	}
	return b
}

// uvarintLen returns the length of n's varint.
func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// decodeInto decodes what encodeResponse produced (any other input is an
// error, never a panic), handing each header to set; the body aliases b.
func decodeInto(b []byte, set func(name string, values []string)) (int, []byte, error) {
	if len(b) < 3 || b[0] != encodingVersion {
		return 0, nil, errCorrupt
	}
	status := int(binary.BigEndian.Uint16(b[1:3]))
	if status < 100 || status > 999 {
		return 0, nil, errCorrupt
	}
	b = b[3:]
	n, b, ok := wire.Uvarint(b)
	if !ok || n > maxHeaderEntries {
		return 0, nil, errCorrupt
	}
	for range n {
		var nb []byte
		if nb, b, ok = wire.Field(b); !ok || len(nb) == 0 {
			return 0, nil, errCorrupt
		}
		name, known := internedNames[string(nb)] // no allocation for the lookup
		if !known {
			name = string(nb)
		}
		var count uint64
		if count, b, ok = wire.Uvarint(b); !ok || count > maxHeaderEntries || count > uint64(len(b)) {
			return 0, nil, errCorrupt
		}
		values := make([]string, 0, count)
		for range count {
			var vb []byte
			if vb, b, ok = wire.Field(b); !ok {
				return 0, nil, errCorrupt
			}
			values = append(values, string(vb))
		}
		set(name, values)
	}
	return status, b, nil
}

// internedNames are the header names replays usually carry.
var internedNames = func() map[string]string {
	m := make(map[string]string)
	for _, n := range append(DefaultReplayHeaders(), "Cache-Control", "Vary", "Etag") {
		m[n] = n
	}
	return m
}()
