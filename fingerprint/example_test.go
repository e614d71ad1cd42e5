package fingerprint_test

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/fingerprint"
)

// Two JSON bodies with the same content in a different key order and layout
// give the same HTTP fingerprint; a changed value does not.
func ExampleHTTP() {
	first := fingerprint.HTTP(fingerprint.HTTPRequest{
		Method:      "POST",
		Route:       "/v1/payments",
		RawQuery:    "currency=EUR&capture=true",
		ContentType: "application/json",
		Body:        []byte(`{"amount":1250,"customer":"c_42"}`),
	})
	retry := fingerprint.HTTP(fingerprint.HTTPRequest{
		Method:      "POST",
		Route:       "/v1/payments",
		RawQuery:    "capture=true&currency=EUR",
		ContentType: "Application/JSON",
		Body:        []byte("{\n  \"customer\": \"c_42\",\n  \"amount\": 1250\n}"),
	})
	other := fingerprint.HTTP(fingerprint.HTTPRequest{
		Method:      "POST",
		Route:       "/v1/payments",
		RawQuery:    "currency=EUR&capture=true",
		ContentType: "application/json",
		Body:        []byte(`{"amount":9999,"customer":"c_42"}`),
	})

	fmt.Println("retry matches:", first == retry)
	fmt.Println("other body matches:", first == other)
	fmt.Println(first.Alg())
	// Output:
	// retry matches: true
	// other body matches: false
	// http-v2
}

// Value fingerprints any Go value through its JSON encoding: field order
// and map order do not matter.
func ExampleValue() {
	type Transfer struct {
		From   string `json:"from"`
		To     string `json:"to"`
		Amount int64  `json:"amount"`
	}
	a, err := fingerprint.Value(Transfer{From: "acct_1", To: "acct_2", Amount: 500})
	if err != nil {
		panic(err)
	}
	b, err := fingerprint.Value(map[string]any{"amount": 500, "to": "acct_2", "from": "acct_1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(a == b, a.Alg())

	_, err = fingerprint.Value(make(chan int))
	fmt.Println(err)
	// Output:
	// true json-v2
	// fingerprint: encoding value: json: unsupported type: chan int
}

func ExampleCanonicalJSON() {
	out, err := fingerprint.CanonicalJSON([]byte(`{
		"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
		"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
		"literals": [null, true, false]
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output:
	// {"literals":[null,true,false],"numbers":[333333333.33333329,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}
}

// Numbers compare by their exact decimal value, never through a double:
// every spelling of a value has one canonical form, and two values however
// close keep two. Large ids keep their digits; a huge exponent stays in
// exponent form.
func ExampleCanonicalJSON_exactNumbers() {
	for _, in := range []string{
		`[100, 1e2, 100.0, 1.00e+2, 10000e-2]`,
		`[100.000000000000001, 19.990000000000000001, 19.99]`,
		`[12345678901234567890, 1.2345678901234567891e19, 9007199254740993.0]`,
		`[-0, 0.0, 0e5, 1e400, 0.0000001, 1e999999999]`,
	} {
		out, _ := fingerprint.CanonicalJSON([]byte(in))
		fmt.Println(string(out))
	}
	// Output:
	// [100,100,100,100,100]
	// [100.000000000000001,19.990000000000000001,19.99]
	// [12345678901234567890,12345678901234567891,9007199254740993]
	// [0,0,0,1e+400,1e-7,1e+999999999]
}

func ExampleCanonicalJSON_errors() {
	for _, in := range []string{`{"id":1,"id":2}`, `"\ud800"`, `1e1000000001`, `{"a":1} x`} {
		_, err := fingerprint.CanonicalJSON([]byte(in))
		var se *fingerprint.SyntaxError
		fmt.Println(errors.Is(err, fingerprint.ErrInvalidJSON), errors.As(err, &se) && se.Offset >= 0, err)
	}
	// Output:
	// true true fingerprint: invalid JSON at offset 8: duplicate object member name
	// true true fingerprint: invalid JSON at offset 1: lone high surrogate escape
	// true true fingerprint: invalid JSON at offset 0: number out of range (in scientific notation its exponent exceeds 1000000000 in magnitude)
	// true true fingerprint: invalid JSON at offset 8: trailing data after the JSON value
}

// A fingerprint prints as "<alg>:<hex>" and parses back.
func ExampleParse() {
	f := fingerprint.New("proto-v1", sha256.Sum256([]byte("payload")))
	s := f.String()
	g, err := fingerprint.Parse(s)
	fmt.Println(s[:20]+"...", g == f, err)

	_, err = fingerprint.Parse("md5:abc")
	fmt.Println(errors.Is(err, fingerprint.ErrInvalidFingerprint))
	// Output:
	// proto-v1:239f59ed55e... true <nil>
	// true
}

// Fingerprints of different algorithms are not comparable: the caller
// treats the request as matching rather than refusing a faithful retry.
func ExampleFingerprint_Compare() {
	sum := sha256.Sum256([]byte("body"))
	stored := fingerprint.New("http-v2", sum)
	fmt.Println(stored.Compare(fingerprint.New("http-v2", sum)))
	fmt.Println(stored.Compare(fingerprint.New("http-v2", sha256.Sum256(nil))))
	fmt.Println(stored.Compare(fingerprint.New("http-v1", sum))) // stored before an upgrade
	fmt.Println(stored.Compare(fingerprint.Fingerprint{}))
	// Output:
	// true true
	// false true
	// false false
	// false false
}
