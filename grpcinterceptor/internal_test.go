package grpcinterceptor

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		name   string
		values []string
		want   string
		err    error
	}{
		{"uuid", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"quotes are literal", []string{`"abc"`}, `"abc"`, nil},
		{"case kept", []string{"AbC"}, "AbC", nil},
		{"255", []string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
		{"missing", nil, "", errKeyMissing},
		{"empty", []string{""}, "", errKeyMalformed},
		{"256", []string{strings.Repeat("k", 256)}, "", errKeyMalformed},
		{"two values", []string{"a", "b"}, "", errKeyMalformed},
		{"space", []string{"a b"}, "", errKeyMalformed},
		{"tab", []string{"a\tb"}, "", errKeyMalformed},
		{"control", []string{"a\x01"}, "", errKeyMalformed},
		{"DEL", []string{"a\x7f"}, "", errKeyMalformed},
		{"non-ASCII", []string{"clé"}, "", errKeyMalformed},
		{"list", []string{"a,b"}, "", errKeyMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseKey(c.values, defaultMaxKeyLength)
			if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if got != c.want {
				t.Fatalf("key = %q, want %q", got, c.want)
			}
			var ke *keyError
			if err != nil && (!errors.As(err, &ke) || ke.reason == "") {
				t.Fatalf("not a *keyError with a reason: %v", err)
			}
		})
	}
}

// A key error says why, matches its sentinel and middleware.ErrInvalidKey
// (as every idemkit adapter's key errors do), and never repeats the key.
func TestKeyErrors(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   error
		reason string
	}{
		{nil, errKeyMissing, "no idempotency key"},
		{[]string{"a", "b"}, errKeyMalformed, "the key appears 2 times; send it once"},
		{[]string{"a b"}, errKeyMalformed, "character ' ' (a space) at position 1 is not allowed in a key"},
	} {
		_, err := parseKey(c.values, defaultMaxKeyLength)
		var ke *keyError
		if !errors.Is(err, c.want) || !errors.Is(err, middleware.ErrInvalidKey) || !errors.As(err, &ke) || ke.reason != c.reason {
			t.Fatalf("parseKey(%q) = %v; want a *keyError matching %v and middleware.ErrInvalidKey with reason %q", c.values, err, c.want, c.reason)
		}
		if err.Error() != c.want.Error()+": "+c.reason {
			t.Fatalf("message %q", err.Error())
		}
	}
	if errors.Is(errKeyMissing, errKeyMalformed) {
		t.Fatal("the sentinels match each other")
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	st, _ := proto.Marshal(status.New(codes.NotFound, "gone").Proto())
	msg, _ := proto.Marshal(&testgrpc.SimpleResponse{ServerId: "1"})
	for _, s := range []stored{
		{},
		{status: true, payload: st},
		{messageName: "grpc.testing.SimpleResponse", payload: msg},
		{
			header:      metadata.MD{"b": {"2", ""}, "a": {"1"}, "x-bin": {"\x00\xff"}},
			trailer:     metadata.MD{"t": {"x"}},
			messageName: "grpc.testing.SimpleResponse", payload: msg,
		},
	} {
		if !s.status && s.messageName == "" {
			s.messageName = "a.B"
		}
		b := encode(nil, s)
		got, err := decode(b)
		if err != nil {
			t.Fatalf("decode(encode(%v)): %v", s, err)
		}
		if !bytes.Equal(encode(nil, got), b) {
			t.Fatalf("round trip changed %v into %v", s, got)
		}
		if len(b) > prefixSize(s)+len(s.payload) {
			t.Fatalf("prefixSize under-estimates: %d > %d", len(b), prefixSize(s)+len(s.payload))
		}
	}
	for _, bad := range [][]byte{nil, {}, {'g'}, {'g', 1}, {'g', 2, 1, 0, 0}, {'g', 1, 3, 0, 0}, {'g', 1, 1, 0, 0}, {'g', 1, 1, 5}} {
		if _, err := decode(bad); !errors.Is(err, errCorrupt) {
			t.Errorf("decode(%q) = %v, want errCorrupt", bad, err)
		}
	}
}

// TestWireRefused checks the malformed inputs the record's readers refuse:
// an empty or truncated uvarint, a uvarint that is not the shortest, and a
// field longer than what follows.
func TestWireRefused(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":              nil,
		"truncated varint":   {0x80},
		"overlong zero":      {0x80, 0x00},
		"overlong one":       {0x81, 0x00},
		"field past the end": {0x05},
	} {
		if _, _, ok := uvarint(b); ok && name != "field past the end" {
			t.Errorf("%s: uvarint accepted %x", name, b)
		}
		if _, _, ok := field(b); ok {
			t.Errorf("%s: field accepted %x", name, b)
		}
	}
	for _, n := range []int{0, 1, 127, 128, 300, 16384} {
		s := strings.Repeat("x", n)
		f, rest, ok := field(append(appendString(nil, s), "tail"...))
		if !ok || string(f) != s || string(rest) != "tail" {
			t.Fatalf("length %d: field = %d bytes, rest %q, ok %v", n, len(f), rest, ok)
		}
	}
}

// FuzzParseKey: parseKey never panics, accepts only what it documents and
// never returns a key it would refuse.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", "", "a b", "a,b", "\x00", "é", strings.Repeat("x", 300)} {
		f.Add(s, "")
		f.Add(s, "second")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		values := []string{a}
		if b != "" {
			values = append(values, b)
		}
		key, err := parseKey(values, defaultMaxKeyLength)
		if err != nil {
			if !errors.Is(err, errKeyMalformed) {
				t.Fatalf("error %v does not match errKeyMalformed", err)
			}
			if len(a) > 8 && strings.Contains(err.Error(), a) {
				t.Fatal("the error repeats the key")
			}
			return
		}
		if len(values) != 1 || key != a || key == "" || len(key) > defaultMaxKeyLength {
			t.Fatalf("accepted %q", values)
		}
		for i := 0; i < len(key); i++ {
			if c := key[i]; c <= ' ' || c >= 0x7f || c == ',' {
				t.Fatalf("accepted %q with %q", key, c)
			}
		}
	})
}

// FuzzDecode: the record decoder and the replay's rebuild never panic on
// any bytes, and what decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	st, _ := proto.Marshal(status.New(codes.NotFound, "gone").Proto())
	msg, _ := proto.Marshal(&testgrpc.SimpleResponse{ServerId: "1"})
	f.Add(encode(nil, stored{status: true, payload: st, header: metadata.MD{"a": {"1"}}}))
	f.Add(encode(nil, stored{messageName: "grpc.testing.SimpleResponse", payload: msg, trailer: metadata.MD{"t": {"x", "y"}}}))
	f.Add(encode(nil, stored{messageName: "no.Such", payload: msg}))
	f.Add([]byte{'g', 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	g, err := middleware.New(memstore.New())
	if err != nil {
		f.Fatal(err)
	}
	s, err := newServer(g, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := s.rebuild(b)
		if err == nil && (a.resp == nil) == (a.err == nil) {
			t.Fatalf("rebuilt neither or both of a message and an error: %v %v", a.resp, a.err)
		}
		rec, err := decode(b)
		if err != nil {
			return
		}
		if again := encode(nil, rec); !bytes.Equal(again, b) {
			t.Fatalf("decode then encode changed %q into %q", b, again)
		}
	})
}
