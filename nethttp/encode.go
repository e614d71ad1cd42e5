package nethttp

import (
	"encoding/binary"
	"errors"
	"net/http"
	"sort"

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

// encodeResponse encodes r for the record store: a version byte, the status,
// the headers (sorted by name, values in order) and the body.
func encodeResponse(r response) []byte {
	names := make([]string, 0, len(r.Header))
	size := 1 + 2 + binary.MaxVarintLen64 + len(r.Body)
	for name, values := range r.Header {
		names = append(names, name)
		size += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range values {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, size)
	b = append(b, encodingVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(r.Status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = wire.AppendString(b, name)
		values := r.Header[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = wire.AppendString(b, v)
		}
	}
	return append(b, r.Body...)
}

// decodeInto decodes what encodeResponse produced (any other input is an
// error, never a panic), handing each header to set, and
// returns the status and the body (which aliases b). Well-known header
// names are interned, so they cost no allocation.
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
	for _, n := range append(DefaultReplayHeaders(), "Content-Location", "Cache-Control", "Vary", "Etag") {
		m[n] = n
	}
	return m
}()
