package fingerprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestFastPathsMatchSlowPath checks the literals the number fast paths
// copy as they are against appendDecimal, on many random literals around
// their edges.
func TestFastPathsMatchSlowPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	var c canon
	fast := 0
	for range n {
		lit := randomLiteral(rng)
		if strings.ContainsAny(lit, "eE") {
			continue
		}
		got, err := c.appendCanonical(nil, []byte(lit))
		if err != nil {
			t.Fatalf("CanonicalJSON(%q): %v", lit, err)
		}
		ip, fp, _ := strings.Cut(strings.TrimPrefix(lit, "-"), ".")
		want, ok := appendDecimal(nil, lit[0] == '-', []byte(ip), []byte(fp), 0)
		if !ok {
			t.Fatalf("appendDecimal refused %q", lit)
		}
		if string(got) != string(want) {
			t.Fatalf("CanonicalJSON(%q) = %q, appendDecimal says %q", lit, got, want)
		}
		if string(got) == lit {
			fast++
		}
	}
	if fast < n/20 {
		t.Fatalf("only %d of %d literals are their own canonical form", fast, n)
	}
}

// randomLiteral returns a random JSON number: integers and decimals of up
// to 30 digits, with leading and trailing zeros, -0, and sometimes an
// exponent.
func randomLiteral(rng *rand.Rand) string {
	digits := func(n int, lead bool) string {
		var sb strings.Builder
		for i := range n {
			d := rng.IntN(10)
			if rng.IntN(4) == 0 {
				d = 0
			}
			if i == 0 && lead && d == 0 {
				d = 1 + rng.IntN(9)
			}
			sb.WriteByte(byte('0' + d))
		}
		return sb.String()
	}
	var sb strings.Builder
	if rng.IntN(2) == 0 {
		sb.WriteByte('-')
	}
	if rng.IntN(3) == 0 {
		sb.WriteByte('0')
	} else {
		sb.WriteString(digits(1+rng.IntN(30), true))
	}
	if rng.IntN(4) > 0 {
		sb.WriteString("." + strings.Repeat("0", rng.IntN(9)) + digits(1+rng.IntN(30), false))
		if rng.IntN(4) == 0 {
			sb.WriteString(strings.Repeat("0", 1+rng.IntN(3)))
		}
	}
	if rng.IntN(5) == 0 {
		sb.WriteString([]string{"e", "E", "e+", "e-", "E-0"}[rng.IntN(5)] + strconv.Itoa(rng.IntN(40)))
	}
	return sb.String()
}

// TestAppendDecimalBounds checks the exponent bound and the saturation of
// huge exponents.
func TestAppendDecimalBounds(t *testing.T) {
	tests := []struct {
		ip, fp string
		exp    int64
		want   string // "" for refused
	}{
		{"1", "", maxExponent, "1e+1000000000"},
		{"1", "", maxExponent + 1, ""},
		{"10", "", maxExponent - 1, "1e+1000000000"},
		{"10", "", maxExponent, ""},
		{"0", "1", -maxExponent + 1, "1e-1000000000"},
		{"0", "01", -maxExponent + 2, "1e-1000000000"},
		{"0", "01", -maxExponent + 1, ""},
		{"1", "", -maxExponent, "1e-1000000000"},
		{"1", "", -maxExponent - 1, ""},
		{"9", "99", maxExponent, "9.99e+1000000000"},
		{"1", "", exponentSaturation, ""},
		{"1", "", -exponentSaturation, ""},
		{"0", "000", exponentSaturation, "0"},
		{"0", "", -exponentSaturation, "0"},
	}
	for _, tt := range tests {
		got, ok := appendDecimal([]byte("x"), false, []byte(tt.ip), []byte(tt.fp), tt.exp)
		if tt.want == "" {
			if ok || string(got) != "x" {
				t.Errorf("appendDecimal(%s.%s e%d) = %q, %v; want refused", tt.ip, tt.fp, tt.exp, got, ok)
			}
			continue
		}
		if !ok || string(got) != "x"+tt.want {
			t.Errorf("appendDecimal(%s.%s e%d) = %q, %v; want %q", tt.ip, tt.fp, tt.exp, got, ok, tt.want)
		}
	}
	for _, tt := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"+7", 7}, {"-0012", -12}, {"000000000000000000000000001", 1},
		{"999999999999999999", 999999999999999999}, {"1000000000000000000", exponentSaturation},
		{"-99999999999999999999999", -exponentSaturation},
	} {
		if got := parseExponent([]byte(tt.in)); got != tt.want {
			t.Errorf("parseExponent(%q) = %d, want %d", tt.in, got, tt.want)
		}
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
	names := []string{"a", "b", "ab", "B", "A", "aB", "k", "K", "\\u212a", "s", "S", "\u017f", "\u03c3", "\u03a3", "\u03c2", "\u00df", "\u1e9e", "ss", "id", "\\u0061x", "\u00e9", "\\u00e9t\u00e9", "\U0001F600", "\uFB33", "\\ud83d\\ude01",
		"\\n", "\\\"q", "z", "_", "0", "\u20ac", "\\u0000", "items", "metadata", "a\\/b"}
	k := rng.IntN(11)
	if depth > 6 {
		k = 6 + rng.IntN(5)
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
	case 8:
		return randomLiteral(rng)
	default:
		f := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(60)-30))
		return strconv.FormatFloat(f, []byte("efg")[rng.IntN(3)], -1, 64)
	}
}

func unescapeForTest(s string) []byte { return unescape(nil, []byte(s)) }

// modelCanonical is a straightforward canonicaliser over encoding/json's
// tokens, with numbers through modelNumber, for comparison. It sorts an
// object's members by UTF-16 code units, then gives each place, in order,
// the first member not yet placed whose name strings.EqualFold matches to
// that of the member the sort put there: members whose names encoding/json
// matches alike keep their input order on the places of their names.
func modelCanonical(data []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var sb strings.Builder
	var numErr error
	var write func() error
	write = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case nil:
			sb.WriteString("null")
		case bool:
			sb.WriteString(strconv.FormatBool(v))
		case json.Number:
			s, err := modelNumber(string(v))
			if err != nil && numErr == nil {
				numErr = err
			}
			sb.WriteString(s)
		case string:
			sb.Write(appendString(nil, []byte(v)))
		case json.Delim:
			if v == '[' {
				sb.WriteString("[")
				for i := 0; dec.More(); i++ {
					if i > 0 {
						sb.WriteString(",")
					}
					if err := write(); err != nil {
						return err
					}
				}
				sb.WriteString("]")
				_, err := dec.Token()
				return err
			}
			// An object: each member's name and canonical value, in input
			// order, written aside.
			type member struct{ name, value string }
			var ms []member
			outer := sb
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return err
				}
				sb = strings.Builder{}
				if err := write(); err != nil {
					return err
				}
				ms = append(ms, member{tok.(string), sb.String()})
			}
			sb = outer
			if _, err := dec.Token(); err != nil {
				return err
			}
			sorted := slices.Clone(ms)
			slices.SortFunc(sorted, func(a, b member) int {
				return slices.Compare(utf16.Encode([]rune(a.name)), utf16.Encode([]rune(b.name)))
			})
			placed := make([]bool, len(ms))
			sb.WriteString("{")
			for i, s := range sorted {
				if i > 0 {
					sb.WriteString(",")
				}
				for j, m := range ms {
					if !placed[j] && strings.EqualFold(m.name, s.name) {
						placed[j] = true
						sb.Write(appendString(nil, []byte(m.name)))
						sb.WriteString(":")
						sb.WriteString(m.value)
						break
					}
				}
			}
			sb.WriteString("}")
		}
		return nil
	}
	if err := write(); err != nil {
		return "", err
	}
	return sb.String(), numErr
}

// modelNumber is the canonical form of a JSON number computed with
// math/big: the mantissa as a big.Int stripped of its trailing zeros, the
// exponent as a big.Int, then the form the package documents.
func modelNumber(lit string) (string, error) {
	neg := strings.HasPrefix(lit, "-")
	mant, expText, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(lit, "-")), "e")
	ip, fp, _ := strings.Cut(mant, ".")
	d, ok := new(big.Int).SetString(ip+fp, 10)
	if !ok {
		return "", fmt.Errorf("bad mantissa in %q", lit)
	}
	if d.Sign() == 0 {
		return "0", nil
	}
	e := new(big.Int)
	if expText != "" {
		if _, ok := e.SetString(expText, 10); !ok {
			return "", fmt.Errorf("bad exponent in %q", lit)
		}
	}
	e.Sub(e, big.NewInt(int64(len(fp))))
	ten, q, r := big.NewInt(10), new(big.Int), new(big.Int)
	for {
		q.QuoRem(d, ten, r)
		if r.Sign() != 0 {
			break
		}
		d.Set(q)
		e.Add(e, big.NewInt(1))
	}
	digits := d.String()
	k := len(digits)
	x := new(big.Int).Add(e, big.NewInt(int64(k-1))) // d.ddd × 10^x
	if x.CmpAbs(big.NewInt(maxExponent)) > 0 {
		return "", fmt.Errorf("%q out of range", lit)
	}
	n := int(x.Int64()) + 1
	var sb strings.Builder
	if neg {
		sb.WriteString("-")
	}
	switch ee := n - k; {
	case ee >= 0 && ee <= 20:
		sb.WriteString(digits + strings.Repeat("0", ee))
	case ee < 0 && n > 0:
		sb.WriteString(digits[:n] + "." + digits[n:])
	case ee < 0 && n >= -5:
		sb.WriteString("0." + strings.Repeat("0", -n) + digits)
	default:
		sb.WriteString(digits[:1])
		if k > 1 {
			sb.WriteString("." + digits[1:])
		}
		fmt.Fprintf(&sb, "e%+d", n-1)
	}
	return sb.String(), nil
}

// FuzzCanonicalModes checks that the two ways of ordering members (in
// place, recorded with a final pass) agree on every input, and with the
// model of TestCanonicalModel on every input they accept.
func FuzzCanonicalModes(f *testing.F) {
	f.Add([]byte(`{"b":{"d":[{"f":1,"e":2}],"c":0},"a":[{"y":1,"x":2}]}`))
	f.Add([]byte(`[{"b":1,"a":2},{"\u00e9":1,"\U0001F600":2,"\uFB33":3}]`))
	f.Add([]byte(`{"b":1,"a":2,"b":3}`))
	f.Add([]byte(`{"b":1,"a":{"K":2,"k":3},"B":3,"A":[{"\u212a":1,"s":2,"K":3,"\u017f":4}]}`))
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
