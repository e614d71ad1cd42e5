package fingerprint_test

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

// maxAlgLen is the longest algorithm name a Fingerprint may carry, as
// documented.
const maxAlgLen = 32

func TestStringParseRoundTrip(t *testing.T) {
	sum := sha256.Sum256([]byte("hello"))
	for _, alg := range []string{"http-v2", "json-v2", "a", "proto.v2", strings.Repeat("z", maxAlgLen)} {
		f := fingerprint.New(alg, sum)
		s := f.String()
		want := alg + ":2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
		if s != want {
			t.Errorf("String() = %q, want %q", s, want)
		}
		g, err := fingerprint.Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if g != f {
			t.Errorf("Parse(String()) = %v, want %v", g, f)
		}
		if g.Alg() != alg || g.Sum() != sum || g.IsZero() {
			t.Errorf("Parse(%q) = alg %q, sum %x, zero %v", s, g.Alg(), g.Sum(), g.IsZero())
		}
	}
}

func TestZeroFingerprintIsEmptyAndUnparseable(t *testing.T) {
	var z fingerprint.Fingerprint
	if !z.IsZero() || z.String() != "" || z.Alg() != "" {
		t.Errorf("zero value: IsZero %v, String %q, Alg %q", z.IsZero(), z.String(), z.Alg())
	}
	if f := fingerprint.New("", sha256.Sum256(nil)); f != z {
		t.Errorf("New with an empty alg = %v, want the zero value", f)
	}
	if _, err := fingerprint.Parse(""); !errors.Is(err, fingerprint.ErrInvalidFingerprint) {
		t.Errorf("Parse(\"\") error = %v, want ErrInvalidFingerprint", err)
	}
}

func TestParseRefuses(t *testing.T) {
	hex64 := strings.Repeat("0123456789abcdef", 4)
	for _, s := range []string{
		"",
		"http-v2",
		"http-v2:",
		":" + hex64,
		"HTTP-v1:" + hex64,
		"http_v1:" + hex64,
		"http v1:" + hex64,
		strings.Repeat("a", maxAlgLen+1) + ":" + hex64,
		"http-v2:" + strings.ToUpper(hex64),
		"http-v2:" + hex64[:63],
		"http-v2:" + hex64 + "0",
		"http-v2:" + hex64[:63] + "g",
		"http-v2:" + hex64 + "\n",
		" http-v2:" + hex64,
		"http-v2::" + hex64[1:],
		"http-v2:" + hex64[:62] + "\u00e9",
	} {
		f, err := fingerprint.Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, f)
			continue
		}
		if !errors.Is(err, fingerprint.ErrInvalidFingerprint) {
			t.Errorf("Parse(%q) error %v does not match ErrInvalidFingerprint", s, err)
		}
		if !f.IsZero() {
			t.Errorf("Parse(%q) returned %v with its error", s, f)
		}
		if len(err.Error()) > 120 {
			t.Errorf("Parse(%q) error too long: %v", s, err)
		}
	}
}

func TestCompareSameDigestAndAlgorithmFamily(t *testing.T) {
	a := sha256.Sum256([]byte("a"))
	b := sha256.Sum256([]byte("b"))
	var zero fingerprint.Fingerprint
	tests := []struct {
		name             string
		f, g             fingerprint.Fingerprint
		same, comparable bool
	}{
		{"equal", fingerprint.New("http-v2", a), fingerprint.New("http-v2", a), true, true},
		{"different digest", fingerprint.New("http-v2", a), fingerprint.New("http-v2", b), false, true},
		// A record written before an algorithm upgrade: not comparable,
		// so never a mismatch.
		{"older alg, same digest", fingerprint.New("http-v1", a), fingerprint.New("http-v2", a), false, false},
		{"older alg, other digest", fingerprint.New("json-v1", a), fingerprint.New("json-v2", b), false, false},
		// Another family fingerprints another kind of request (an HTTP
		// and a gRPC call sharing a key): never the same.
		{"other family, other digest", fingerprint.New("http-v2", a), fingerprint.New("json-v2", b), false, true},
		{"other family, same digest", fingerprint.New("http-v2", a), fingerprint.New("grpc-v1", a), false, true},
		{"unversioned names", fingerprint.New("custom", a), fingerprint.New("custom-v2", a), false, false},
		{"version is the suffix only", fingerprint.New("a-v1x", a), fingerprint.New("a-v1y", a), false, true},
		{"bare v is not a version", fingerprint.New("httpv1", a), fingerprint.New("httpv2", a), false, true},
		{"zero and zero", zero, zero, false, false},
		{"zero and non-zero", zero, fingerprint.New("http-v2", a), false, false},
		{"non-zero and zero", fingerprint.New("http-v2", a), zero, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			same, comparable := tt.f.Compare(tt.g)
			if same != tt.same || comparable != tt.comparable {
				t.Errorf("Compare = (%v, %v), want (%v, %v)", same, comparable, tt.same, tt.comparable)
			}
			same, comparable = tt.g.Compare(tt.f)
			if same != tt.same || comparable != tt.comparable {
				t.Errorf("reverse Compare = (%v, %v), want (%v, %v)", same, comparable, tt.same, tt.comparable)
			}
		})
	}
}

func TestFingerprintMarshalsAsItsString(t *testing.T) {
	type record struct {
		FP    fingerprint.Fingerprint  `json:"fp"`
		Empty fingerprint.Fingerprint  `json:"empty"`
		Ptr   *fingerprint.Fingerprint `json:"ptr,omitempty"`
	}
	f := fingerprint.New("json-v2", sha256.Sum256([]byte("x")))
	in := record{FP: f, Ptr: &f}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"fp":"` + f.String() + `","empty":"","ptr":"` + f.String() + `"}`
	if string(data) != want {
		t.Errorf("json.Marshal = %s, want %s", data, want)
	}
	var out record
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.FP != f || !out.Empty.IsZero() || out.Ptr == nil || *out.Ptr != f {
		t.Errorf("round trip = %+v, want %+v", out, in)
	}

	var g fingerprint.Fingerprint
	if err := g.UnmarshalText([]byte("nope")); !errors.Is(err, fingerprint.ErrInvalidFingerprint) {
		t.Errorf("UnmarshalText(nope) = %v, want ErrInvalidFingerprint", err)
	}
	if _, err := fingerprint.New("Bad Alg", f.Sum()).MarshalText(); !errors.Is(err, fingerprint.ErrInvalidFingerprint) {
		t.Errorf("MarshalText with an invalid alg = %v, want ErrInvalidFingerprint", err)
	}
}
