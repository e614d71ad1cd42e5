package nethttp

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

func TestResponseEncodingRoundTrip(t *testing.T) {
	for _, r := range []response{
		{Status: 201, Header: http.Header{"Location": {"/orders/1"}, "Link": {"<a>", "<b>"}}, Body: []byte(`{"order":1}`)},
		{Status: 204, Header: http.Header{}},
		{Status: 999, Header: http.Header{"X": {""}}, Body: bytes.Repeat([]byte{0, 255}, 1000)},
	} {
		got, err := decodeResponse(encodeResponse(r))
		if err != nil || got.Status != r.Status || !reflect.DeepEqual(got.Header, r.Header) || !bytes.Equal(got.Body, r.Body) {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 200, 0}, {1, 0, 50, 0}, {1, 0, 200, 5}, {1, 0, 200, 1, 3, 'a'}} {
		if _, err := decodeResponse(bad); err == nil {
			t.Fatalf("decodeResponse(%v) accepted corrupt input", bad)
		}
	}
}

// FuzzDecodeResponse: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to a value that decodes the same.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(encodeResponse(response{Status: 200, Header: http.Header{"A": {"b"}}, Body: []byte("x")}))
	f.Add([]byte{1, 0, 200, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeResponse(b)
		if err != nil {
			return
		}
		again, err := decodeResponse(encodeResponse(r))
		if err != nil || again.Status != r.Status || !bytes.Equal(again.Body, r.Body) || len(again.Header) != len(r.Header) {
			t.Fatalf("re-encoding changed the response: %+v → %+v, %v", r, again, err)
		}
	})
}

// decodeResponse decodes what encodeResponse produced, as a replay does.
func decodeResponse(b []byte) (response, error) {
	status, h, body, err := DecodeResponse(b)
	return response{Status: status, Header: h, Body: body}, err
}

// TestHeadSizedExactly: appendHead makes exactly the room it is asked for
// after what it writes, so a body of that size costs no further
// allocation.
func TestHeadSizedExactly(t *testing.T) {
	h := http.Header{"Location": {"/orders/1"}, "Link": {"<a>", "<b>"}, "X-Long": {string(bytes.Repeat([]byte{'v'}, 300))}}
	for _, room := range []int{0, 1, 128, 5000} {
		b := appendHead(nil, 201, h, nil, room)
		if cap(b)-len(b) < room {
			t.Fatalf("room %d: %d bytes left after the head", room, cap(b)-len(b))
		}
		if r, err := decodeResponse(b); err != nil || r.Status != 201 || !reflect.DeepEqual(r.Header, h) {
			t.Fatalf("room %d: %+v, %v", room, r, err)
		}
	}
}
