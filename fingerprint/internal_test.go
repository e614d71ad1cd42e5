package fingerprint

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestAppendNumberRFC8785 checks the ECMAScript number form against the
// IEEE-754 examples of RFC 8785, Appendix B.
func TestAppendNumberRFC8785(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // -0
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		if got := string(appendNumber(nil, f)); got != tt.want {
			t.Errorf("appendNumber(%016x = %v) = %q, want %q", tt.bits, f, got, tt.want)
		}
	}
}

func TestAppendNumberForms(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{1e30, "1e+30"},
		{4.5, "4.5"},
		{2e-3, "0.002"},
		{0.000001, "0.000001"},
		{1e-7, "1e-7"},
		{1.5e-7, "1.5e-7"},
		{1e21, "1e+21"},
		{1e20, "100000000000000000000"},
		{123456789012345680000, "123456789012345680000"},
		{-1.25e+25, "-1.25e+25"},
		{0.1, "0.1"},
		{100, "100"},
		{1e-27, "1e-27"},
	}
	for _, tt := range tests {
		if got := string(appendNumber(nil, tt.f)); got != tt.want {
			t.Errorf("appendNumber(%v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}

// TestShortDecimalMatchesSlowPath checks the fast path for plain decimals
// against parsing and formatting, on many random decimals around its edges.
func TestShortDecimalMatchesSlowPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	digits := func(n int, lead bool) string {
		var sb strings.Builder
		for i := range n {
			d := rng.IntN(10)
			if i == 0 && lead && d == 0 {
				d = 1 + rng.IntN(9)
			}
			sb.WriteByte(byte('0' + d))
		}
		return sb.String()
	}
	n := 200000
	if testing.Short() {
		n = 20000
	}
	fast := 0
	for range n {
		var lit string
		if rng.IntN(3) == 0 {
			lit = "0"
		} else {
			lit = digits(1+rng.IntN(17), true)
		}
		intEnd := len(lit)
		lit += "." + strings.Repeat("0", rng.IntN(8)) + digits(1+rng.IntN(17), false)
		if rng.IntN(2) == 0 {
			lit = "-" + lit
			intEnd++
		}
		if !isShortDecimal([]byte(lit), intEnd) {
			continue
		}
		fast++
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			t.Fatal(err)
		}
		if slow := string(appendNumber(nil, f)); slow != lit {
			t.Fatalf("fast path keeps %q, but its ECMAScript form is %q", lit, slow)
		}
	}
	if fast < n/20 {
		t.Fatalf("only %d of %d literals took the fast path", fast, n)
	}
}

func TestCompareUTF16(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"a", "", 1},
		{"a", "b", -1},
		{"ab", "a", 1},
		{"\U0001F600", "\uFB33", -1}, // D83D DE00 < FB33
		{"\uFB33", "\U0001F600", 1},
		{"\uE000", "\U00010000", 1}, // E000 > D800
		{"\uD7FF", "\U00010000", -1},
		{"\U0001F600", "\U0001F601", -1},
		{"\u00f6", "\u20ac", -1},
		{"\r", "1", -1},
		{"x\U0001F600", "x\uFB33y", -1},
		{"\u0080", "\u00f6", -1},
		{"é", "ê", -1}, // differ in the continuation byte
	}
	for _, tt := range tests {
		if got := compareUTF16([]byte(tt.a), []byte(tt.b)); got != tt.want {
			t.Errorf("compareUTF16(%+q, %+q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestQueryUnescapeMatchesURL and the media type fast path are checked
// against the standard library in http_test.go (external); here the helpers
// that decide between fast and slow paths.
func TestValidMediaType(t *testing.T) {
	tests := []struct {
		mt   string
		want bool
	}{
		{"application/json", true},
		{"Application/JSON", true},
		{"text", true},
		{"", false},
		{"/json", false},
		{"application/", false},
		{"application/json/x", false},
		{"application json", false},
		{"a/b c", false},
		{"application/vnd.api+json", true},
	}
	for _, tt := range tests {
		if got := validMediaType(tt.mt); got != tt.want {
			t.Errorf("validMediaType(%q) = %v, want %v", tt.mt, got, tt.want)
		}
	}
}

// TestCanonicalModel compares CanonicalJSON, in both ways of ordering
// members (in place and recorded), with a model built on encoding/json and
// unicode/utf16, on random documents.
func TestCanonicalModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 5000
	if testing.Short() {
		n = 500
	}
	var c canon
	for i := range n {
		doc := randomJSON(rng, 0)
		for doc[0] != '{' && doc[0] != '[' && rng.IntN(10) > 0 {
			doc = randomJSON(rng, 0) // mostly containers
		}
		if i%7 == 0 {
			doc = "\n " + strings.ReplaceAll(doc, ",", " ,\t") + " "
		}
		want, err := modelCanonical([]byte(doc))
		if err != nil {
			t.Fatalf("model refused %q: %v", doc, err)
		}
		for _, inPlace := range []int{0, 40, inPlaceMax, math.MaxInt} {
			got, err := c.appendCanonicalMode([]byte("prefix"), []byte(doc), inPlace)
			if err != nil {
				t.Fatalf("CanonicalJSON(%q): %v", doc, err)
			}
			if string(got) != "prefix"+want {
				t.Fatalf("inPlace %d: CanonicalJSON(%q)\n got %s\nwant prefix%s", inPlace, doc, got, want)
			}
		}
	}
}

// randomJSON returns a random JSON document without duplicate names.
func randomJSON(rng *rand.Rand, depth int) string {
	names := []string{"a", "b", "ab", "B", "id", "\\u0061x", "\u00e9", "\\u00e9t\u00e9", "\U0001F600", "\uFB33", "\\ud83d\\ude01",
		"\\n", "\\\"q", "z", "_", "0", "\u20ac", "\\u0000", "items", "metadata", "a\\/b"}
	k := rng.IntN(10)
	if depth > 6 {
		k = 6 + rng.IntN(4)
	}
	switch k {
	case 0, 1: // object
		var sb strings.Builder
		sb.WriteString("{")
		seen := map[string]bool{}
		for j := range rng.IntN(8) {
			name := names[rng.IntN(len(names))]
			if rng.IntN(4) == 0 {
				name += strconv.Itoa(rng.IntN(50))
			}
			key := string(unescapeForTest(name))
			if seen[key] {
				continue
			}
			seen[key] = true
			if j > 0 && sb.Len() > 1 {
				sb.WriteString(",")
			}
			sb.WriteString(`"` + name + `":` + randomJSON(rng, depth+1))
		}
		sb.WriteString("}")
		return sb.String()
	case 2, 3: // array
		var parts []string
		for range rng.IntN(5) {
			parts = append(parts, randomJSON(rng, depth+1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 4:
		return `"` + names[rng.IntN(len(names))] + ` text \u001f\t\\ \u2028 /"`
	case 5:
		return []string{"true", "false", "null"}[rng.IntN(3)]
	case 6:
		return strconv.Itoa(rng.IntN(2000000) - 1000000)
	case 7:
		return []string{"12345678901234567890", "-0", "9007199254740993", "0", "-98765432109876543210"}[rng.IntN(5)]
	default:
		f := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(60)-30))
		return strconv.FormatFloat(f, []byte("efg")[rng.IntN(3)], -1, 64)
	}
}

func unescapeForTest(s string) []byte { return unescape(nil, []byte(s)) }

// modelCanonical is a straightforward JCS (with the big-integer extension)
// over encoding/json's decoding, for comparison.
func modelCanonical(data []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	var sb strings.Builder
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case nil:
			sb.WriteString("null")
		case bool:
			sb.WriteString(strconv.FormatBool(v))
		case json.Number:
			s := string(v)
			if !strings.ContainsAny(s, ".eE") {
				if s == "-0" {
					s = "0"
				}
				sb.WriteString(s)
				return
			}
			f, _ := strconv.ParseFloat(s, 64)
			sb.Write(appendNumber(nil, f))
		case string:
			sb.Write(appendString(nil, []byte(v)))
		case []any:
			sb.WriteString("[")
			for i, e := range v {
				if i > 0 {
					sb.WriteString(",")
				}
				write(e)
			}
			sb.WriteString("]")
		case map[string]any:
			keys := slices.Collect(maps.Keys(v))
			slices.SortFunc(keys, func(a, b string) int {
				return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			})
			sb.WriteString("{")
			for i, k := range keys {
				if i > 0 {
					sb.WriteString(",")
				}
				sb.Write(appendString(nil, []byte(k)))
				sb.WriteString(":")
				write(v[k])
			}
			sb.WriteString("}")
		}
	}
	write(v)
	return sb.String(), nil
}

// FuzzCanonicalModes checks that the two ways of ordering members (in
// place, recorded with a final pass) agree on every input, and with the
// model of TestCanonicalModel on every input they accept.
func FuzzCanonicalModes(f *testing.F) {
	f.Add([]byte(`{"b":{"d":[{"f":1,"e":2}],"c":0},"a":[{"y":1,"x":2}]}`))
	f.Add([]byte(`[{"b":1,"a":2},{"\u00e9":1,"\U0001F600":2,"\uFB33":3}]`))
	f.Add([]byte(`{"b":1,"a":2,"b":3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c canon
		inPlace, err1 := c.appendCanonicalMode(nil, data, math.MaxInt)
		inPlace = bytes.Clone(inPlace)
		recorded, err2 := c.appendCanonicalMode(nil, data, 0)
		if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
			t.Fatalf("errors differ: %v, %v", err1, err2)
		}
		if err1 != nil {
			return
		}
		if !bytes.Equal(inPlace, recorded) {
			t.Fatalf("in place %q, recorded %q", inPlace, recorded)
		}
		want, err := modelCanonical(data)
		if err != nil {
			t.Fatalf("model refused %q: %v", data, err)
		}
		if string(inPlace) != want {
			t.Fatalf("CanonicalJSON(%q) = %q, model says %q", data, inPlace, want)
		}
	})
}
