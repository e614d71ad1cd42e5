package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestRoundTrip checks that what AppendString writes, Field reads back,
// for lengths whose varints take one to three bytes.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16384} {
		s := string(bytes.Repeat([]byte{'x'}, n))
		b := AppendString(nil, s)
		b = append(b, "tail"...)
		f, rest, ok := Field(b)
		if !ok || string(f) != s || string(rest) != "tail" {
			t.Fatalf("length %d: Field = %d bytes, rest %q, ok %v", n, len(f), rest, ok)
		}
	}
}

// TestReadersRefuseMalformedInput checks the malformed inputs the readers refuse: an empty or
// truncated varint, a varint that is not the shortest, and a field longer
// than what follows.
func TestReadersRefuseMalformedInput(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":              nil,
		"truncated varint":   {0x80},
		"overlong zero":      {0x80, 0x00},
		"overlong one":       {0x81, 0x00},
		"field past the end": binary.AppendUvarint(nil, 5),
	} {
		if _, _, ok := Uvarint(b); ok && name != "field past the end" {
			t.Errorf("%s: Uvarint accepted %x", name, b)
		}
		if _, _, ok := Field(b); ok {
			t.Errorf("%s: Field accepted %x", name, b)
		}
	}
}
