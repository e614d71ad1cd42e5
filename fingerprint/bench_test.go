package fingerprint_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

// smallBody is a typical ~200 byte JSON request body, keys not in order.
var smallBody = []byte(`{"customer":"cus_9s6XKzkNRiz8i3","amount":1250,"currency":"eur","description":"Order #1234","metadata":{"order_id":"1234","channel":"web"},"capture":true,"items":[{"sku":"A-1","qty":2,"price":4.99}]}`)

func BenchmarkCanonicalJSON(b *testing.B) {
	b.SetBytes(int64(len(smallBody)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprint.CanonicalJSON(smallBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSON(b *testing.B) {
	b.SetBytes(int64(len(smallBody)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprint.JSON(smallBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHTTP(b *testing.B) {
	benchmarks := []struct {
		name string
		req  fingerprint.HTTPRequest
	}{
		{"json", fingerprint.HTTPRequest{Method: "POST", Route: "/v1/payments", ContentType: "application/json", Body: smallBody}},
		{"json-charset-query", fingerprint.HTTPRequest{Method: "POST", Route: "/v1/payments", RawQuery: "expand=customer&dry_run=false",
			ContentType: "application/json; charset=utf-8", Body: smallBody}},
		{"form", fingerprint.HTTPRequest{Method: "POST", Route: "/v1/payments", ContentType: "application/x-www-form-urlencoded",
			Body: []byte("amount=1250&currency=eur&customer=cus_9s6XKzkNRiz8i3&description=Order+%231234")}},
		{"raw-64KiB", fingerprint.HTTPRequest{Method: "PUT", Route: "/v1/files/{id}", ContentType: "application/octet-stream",
			Body: bytes.Repeat([]byte{0xAB}, 64<<10)}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(bm.req.Body)))
			b.ReportAllocs()
			for b.Loop() {
				fingerprint.HTTP(bm.req)
			}
		})
	}
}

func BenchmarkValue(b *testing.B) {
	type item struct {
		SKU   string  `json:"sku"`
		Qty   int     `json:"qty"`
		Price float64 `json:"price"`
	}
	type order struct {
		Customer string            `json:"customer"`
		Amount   int64             `json:"amount"`
		Currency string            `json:"currency"`
		Metadata map[string]string `json:"metadata"`
		Items    []item            `json:"items"`
	}
	v := order{Customer: "cus_9s6XKzkNRiz8i3", Amount: 1250, Currency: "eur",
		Metadata: map[string]string{"order_id": "1234", "channel": "web"}, Items: []item{{"A-1", 2, 4.99}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprint.Value(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalJSONLarge measures ~1 MiB documents: a bulk array of
// small objects whose keys are out of order (each rewritten in place), and
// an object nested 999 deep, out of order at every level, around a 1 MiB
// string (recorded and emitted once more).
func BenchmarkCanonicalJSONLarge(b *testing.B) {
	benchmarks := []struct {
		name string
		doc  []byte
	}{
		{"bulk-array", []byte("[" + strings.Repeat(`{"sku":"A-1","qty":2,"price":4.99},`, 30000) + "0]")},
		{"deep-unsorted", []byte(strings.Repeat(`{"b":`, 999) + `"` + strings.Repeat("x", 1<<20) + `"` + strings.Repeat(`,"a":0}`, 999))},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(bm.doc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fingerprint.CanonicalJSON(bm.doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCanonicalJSONNumbers measures arrays of numbers: ones already in
// canonical form (integers, short decimals, the fast paths) and others that
// are rewritten (trailing zeros, exponents, long mantissas).
func BenchmarkCanonicalJSONNumbers(b *testing.B) {
	benchmarks := []struct {
		name string
		doc  []byte
	}{
		{"canonical", []byte("[" + strings.Repeat(`1250,19.99,-0.5,12.5,4.99,1000000,0.000123,12345678901234567890,`, 1000) + "0]")},
		{"rewritten", []byte("[" + strings.Repeat(`100.0,1e2,4.990,-1.5e-7,1.25E+1,0.12345678901234567890,1e300,`, 1000) + "0]")},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(bm.doc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fingerprint.CanonicalJSON(bm.doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
