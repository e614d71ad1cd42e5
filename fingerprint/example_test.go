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
