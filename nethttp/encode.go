package nethttp

import (
	"encoding/binary"
	"errors"
	"net/http"
	"sort"
)

// Response is a recorded HTTP response: what a replay writes.
type Response struct {
	Status int
	Header http.Header // the replayable headers only
	Body   []byte
}

// errCorrupt is returned by DecodeResponse for bytes it did not produce.
var errCorrupt = errors.New("nethttp: recorded response is corrupt")

const encodingVersion = 1

// maxHeaderEntries bounds what a decoder accepts, so corrupt input cannot
// make it allocate without limit.
const maxHeaderEntries = 1 << 12

// EncodeResponse encodes r for the record store: a version byte, the status,
// the headers (sorted by name, values in order) and the body.
func EncodeResponse(r Response) []byte {
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
		b = appendString(b, name)
		values := r.Header[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeResponse decodes what EncodeResponse produced. Any other input is
// an error, never a panic.
func DecodeResponse(b []byte) (Response, error) {
	if len(b) < 3 || b[0] != encodingVersion {
		return Response{}, errCorrupt
	}
	r := Response{Status: int(binary.BigEndian.Uint16(b[1:3]))}
	if r.Status < 100 || r.Status > 999 {
		return Response{}, errCorrupt
	}
	b = b[3:]
	n, b, ok := uvarint(b)
	if !ok || n > maxHeaderEntries {
		return Response{}, errCorrupt
	}
	r.Header = make(http.Header, n)
	for range n {
		var name string
		if name, b, ok = str(b); !ok || name == "" {
			return Response{}, errCorrupt
		}
		var count uint64
		if count, b, ok = uvarint(b); !ok || count > maxHeaderEntries {
			return Response{}, errCorrupt
		}
		values := make([]string, 0, count)
		for range count {
			var v string
			if v, b, ok = str(b); !ok {
				return Response{}, errCorrupt
			}
			values = append(values, v)
		}
		r.Header[name] = values
	}
	r.Body = b
	return r, nil
}

func uvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func str(b []byte) (string, []byte, bool) {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return "", nil, false
	}
	return string(b[:n]), b[n:], true
}
