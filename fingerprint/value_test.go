package fingerprint_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

type orderAB struct {
	A string `json:"a"`
	B int    `json:"b"`
}

type orderBA struct {
	B int    `json:"b"`
	A string `json:"a"`
}

// dupMarshaler writes JSON with a duplicate member name.
type dupMarshaler struct{}

func (dupMarshaler) MarshalJSON() ([]byte, error) { return []byte(`{"a":1,"a":2}`), nil }

func mustValue(t *testing.T, v any) fingerprint.Fingerprint {
	t.Helper()
	f, err := fingerprint.Value(v)
	if err != nil {
		t.Fatalf("Value(%#v): %v", v, err)
	}
	if f.Alg() != "json-v2" {
		t.Fatalf("Value(%#v).Alg() = %q", v, f.Alg())
	}
	return f
}

func TestValueEqual(t *testing.T) {
	m1 := map[string]any{}
	m2 := map[string]any{}
	for i, k := range []string{"x", "\U0001F600", "\uFB33", "b", "a"} {
		m1[k] = i
	}
	for i, k := range []string{"a", "b", "\uFB33", "\U0001F600", "x"} {
		m2[k] = 4 - i
	}
	tests := []struct {
		name string
		a, b any
	}{
		{"struct field order", orderAB{A: "x", B: 1}, orderBA{B: 1, A: "x"}},
		{"struct and map", orderAB{A: "x", B: 1}, map[string]any{"b": 1, "a": "x"}},
		{"map order", m1, m2},
		{"raw message", json.RawMessage(`{ "b" : 1.0 , "a" : "x" }`), orderAB{A: "x", B: 1}},
		{"big uint64", uint64(math.MaxUint64), json.Number("18446744073709551615")},
		{"html escaping irrelevant", "<a&b>", json.RawMessage(`"<a&b>"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if fa, fb := mustValue(t, tt.a), mustValue(t, tt.b); fa != fb {
				t.Errorf("Value(%#v) = %v, Value(%#v) = %v; want equal", tt.a, fa, tt.b, fb)
			}
		})
	}
}

func TestValueDiffers(t *testing.T) {
	tests := []struct {
		name string
		a, b any
	}{
		{"field value", orderAB{A: "x", B: 1}, orderAB{A: "x", B: 2}},
		{"string vs number", "1", 1},
		{"slice order", []int{1, 2}, []int{2, 1}},
		{"big ids", uint64(12345678901234567890), uint64(12345678901234567891)},
		{"null vs empty", nil, map[string]any{}},
		{"missing field", map[string]any{"a": "x"}, map[string]any{"a": "x", "b": nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if fa, fb := mustValue(t, tt.a), mustValue(t, tt.b); fa == fb {
				t.Errorf("Value(%#v) == Value(%#v) = %v; want different", tt.a, tt.b, fa)
			}
		})
	}
}

func TestValueErrors(t *testing.T) {
	_, err := fingerprint.Value(make(chan int))
	var ute *json.UnsupportedTypeError
	if !errors.As(err, &ute) {
		t.Errorf("Value(chan) error = %v, want a *json.UnsupportedTypeError", err)
	}
	_, err = fingerprint.Value(math.NaN())
	var uve *json.UnsupportedValueError
	if !errors.As(err, &uve) {
		t.Errorf("Value(NaN) error = %v, want a *json.UnsupportedValueError", err)
	}
	_, err = fingerprint.Value(func() {})
	if err == nil {
		t.Error("Value(func) succeeded")
	}
	_, err = fingerprint.Value(dupMarshaler{})
	if !errors.Is(err, fingerprint.ErrInvalidJSON) {
		t.Errorf("Value(duplicate names) error = %v, want ErrInvalidJSON", err)
	}
}

func TestJSONFingerprintIsCanonical(t *testing.T) {
	a, err := fingerprint.JSON([]byte(`{"b":[1,2],"a":"\u00e9"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := fingerprint.JSON([]byte("{\"a\":\"\u00e9\", \"b\":[1.0,2e0]}"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("JSON fingerprints differ: %v, %v", a, b)
	}
	if _, err := fingerprint.JSON([]byte(`{"a":`)); !errors.Is(err, fingerprint.ErrInvalidJSON) {
		t.Errorf("JSON(invalid) error = %v, want ErrInvalidJSON", err)
	}
	// json-v2 is the SHA-256 of the canonical form; this value must never
	// change, or stored fingerprints stop matching.
	if got, want := a.String(), "json-v2:"+sha256Hex(`{"a":"é","b":[1,2]}`); got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}
