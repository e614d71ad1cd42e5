package fingerprint_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"maps"
	"mime"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

var baseRequest = fingerprint.HTTPRequest{
	Method:      "POST",
	Route:       "/v1/orders",
	RawQuery:    "currency=EUR&dry_run=false",
	ContentType: "application/json",
	Body:        []byte(`{"customer":"c_123","items":[{"sku":"A-1","qty":2}],"total":19.99}`),
}

// with returns baseRequest changed by fn.
func with(fn func(r *fingerprint.HTTPRequest)) fingerprint.HTTPRequest {
	r := baseRequest
	fn(&r)
	return r
}

func TestHTTPMatches(t *testing.T) {
	base := fingerprint.HTTP(baseRequest)
	if base.Alg() != "http-v2" {
		t.Fatalf("Alg() = %q", base.Alg())
	}
	tests := []struct {
		name string
		req  fingerprint.HTTPRequest
	}{
		{"identical", baseRequest},
		{"JSON keys reordered", with(func(r *fingerprint.HTTPRequest) {
			r.Body = []byte(`{"total":19.99,"items":[{"qty":2,"sku":"A-1"}],"customer":"c_123"}`)
		})},
		{"JSON whitespace and spelling", with(func(r *fingerprint.HTTPRequest) {
			r.Body = []byte("{\n  \"customer\" : \"c\\u005f123\",\n  \"items\" : [ { \"sku\" : \"A-1\", \"qty\" : 2.0 } ],\n  \"total\" : 1999e-2\n}\n")
		})},
		{"query order", with(func(r *fingerprint.HTTPRequest) { r.RawQuery = "dry_run=false&currency=EUR" })},
		{"query escapes", with(func(r *fingerprint.HTTPRequest) { r.RawQuery = "curr%65ncy=%45UR&dry_run=false&" })},
		{"content type case", with(func(r *fingerprint.HTTPRequest) { r.ContentType = "Application/JSON" })},
		{"content type spaces", with(func(r *fingerprint.HTTPRequest) { r.ContentType = " application/json\t" })},
		{"content type trailing semicolon", with(func(r *fingerprint.HTTPRequest) { r.ContentType = "application/json;" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fingerprint.HTTP(tt.req); got != base {
				t.Errorf("HTTP = %v, want %v", got, base)
			}
		})
	}
}

func TestHTTPDiffers(t *testing.T) {
	base := fingerprint.HTTP(baseRequest)
	tests := []struct {
		name string
		req  fingerprint.HTTPRequest
	}{
		{"method", with(func(r *fingerprint.HTTPRequest) { r.Method = "PUT" })},
		{"method case", with(func(r *fingerprint.HTTPRequest) { r.Method = "post" })},
		{"route", with(func(r *fingerprint.HTTPRequest) { r.Route = "/v1/orders/1" })},
		{"route trailing slash", with(func(r *fingerprint.HTTPRequest) { r.Route = "/v1/orders/" })},
		{"query value", with(func(r *fingerprint.HTTPRequest) { r.RawQuery = "currency=USD&dry_run=false" })},
		{"query missing", with(func(r *fingerprint.HTTPRequest) { r.RawQuery = "" })},
		{"query extra", with(func(r *fingerprint.HTTPRequest) { r.RawQuery = "currency=EUR&dry_run=false&x" })},
		{"query repeated", with(func(r *fingerprint.HTTPRequest) { r.RawQuery = "currency=EUR&currency=EUR&dry_run=false" })},
		{"content type parameter", with(func(r *fingerprint.HTTPRequest) { r.ContentType = "application/json; charset=utf-8" })},
		{"content type other", with(func(r *fingerprint.HTTPRequest) { r.ContentType = "text/plain" })},
		{"content type none", with(func(r *fingerprint.HTTPRequest) { r.ContentType = "" })},
		{"body value", with(func(r *fingerprint.HTTPRequest) {
			r.Body = []byte(`{"customer":"c_123","items":[{"sku":"A-1","qty":3}],"total":19.99}`)
		})},
		{"body array order", with(func(r *fingerprint.HTTPRequest) {
			r.Body = []byte(`{"customer":"c_123","items":[{"qty":2},{"sku":"A-1"}],"total":19.99}`)
		})},
		{"body empty", with(func(r *fingerprint.HTTPRequest) { r.Body = nil })},
		{"body invalid JSON", with(func(r *fingerprint.HTTPRequest) {
			r.Body = []byte(`{"customer":"c_123","items":[{"sku":"A-1","qty":2}],"total":19.99,}`)
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fingerprint.HTTP(tt.req); got == base {
				t.Errorf("HTTP = %v, the same as the base request", got)
			}
		})
	}
}

func TestHTTPPairs(t *testing.T) {
	req := func(method, route, query, ct, body string) fingerprint.HTTPRequest {
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		return fingerprint.HTTPRequest{Method: method, Route: route, RawQuery: query, ContentType: ct, Body: b}
	}
	tests := []struct {
		name string
		a, b fingerprint.HTTPRequest
		same bool
	}{
		{"nil and empty body", req("POST", "/", "", "application/json", ""),
			fingerprint.HTTPRequest{Method: "POST", Route: "/", ContentType: "application/json", Body: []byte{}}, true},
		{"nil and empty body, raw", req("POST", "/", "", "", ""),
			fingerprint.HTTPRequest{Method: "POST", Route: "/", Body: []byte{}}, true},
		{"empty query forms", req("POST", "/", "", "", ""), req("POST", "/", "&&", "", ""), true},
		{"plus is space", req("POST", "/", "q=a+b", "", ""), req("POST", "/", "q=a%20b", "", ""), true},
		{"key without value", req("POST", "/", "flag", "", ""), req("POST", "/", "flag=", "", ""), true},
		{"interleaved repeats", req("POST", "/", "a=1&b=2&a=3", "", ""), req("POST", "/", "b=2&a=1&a=3", "", ""), true},
		{"repeated value order kept", req("POST", "/", "a=1&a=2", "", ""), req("POST", "/", "a=2&a=1", "", ""), false},
		{"query name/value boundary", req("POST", "/", "ab=c", "", ""), req("POST", "/", "a=bc", "", ""), false},
		{"bad escape hashed raw, stable", req("POST", "/", "a=%zz", "", ""), req("POST", "/", "a=%zz", "", ""), true},
		{"bad escape not its escaped form", req("POST", "/", "a=%zz", "", ""), req("POST", "/", "a=%25zz", "", ""), false},
		{"semicolon hashed raw", req("POST", "/", "a=1;b=2", "", ""), req("POST", "/", "b=2;a=1", "", ""), false},
		{"raw query is not a parsed one", req("POST", "/", "a=1&b=%", "", ""), req("POST", "/", "a=1", "", ""), false},
		{"merge-patch+json canonical", req("PATCH", "/x", "", "application/merge-patch+json", `{"b":null,"a":1}`),
			req("PATCH", "/x", "", "application/merge-patch+json", `{ "a": 1, "b": null }`), true},
		{"problem+json canonical", req("POST", "/x", "", "application/problem+json; charset=UTF-8", `{"b":1,"a":2}`),
			req("POST", "/x", "", "application/problem+json;charset=utf-8", `{"a":2,"b":1}`), true},
		{"charset case", req("POST", "/x", "", "application/json; charset=UTF-8", `{}`),
			req("POST", "/x", "", "APPLICATION/JSON; Charset=\"utf-8\"", `{}`), true},
		{"parameter order", req("POST", "/x", "", "text/plain; format=flowed; charset=us-ascii", `x`),
			req("POST", "/x", "", "text/plain; charset=us-ascii; format=flowed", `x`), true},
		{"non-charset parameter value case kept", req("POST", "/x", "", "text/plain; format=Flowed", `x`),
			req("POST", "/x", "", "text/plain; format=flowed", `x`), false},
		{"JSON type keeps parameter apart", req("POST", "/x", "", "application/json", `{}`),
			req("POST", "/x", "", "application/json; charset=utf-8", `{}`), false},
		{"non-JSON body raw", req("POST", "/x", "", "text/plain", `{"a":1}`),
			req("POST", "/x", "", "text/plain", `{ "a":1}`), false},
		{"invalid JSON stable", req("POST", "/x", "", "application/json", `{"a":1,"a":2}`),
			req("POST", "/x", "", "application/json", `{"a":1,"a":2}`), true},
		{"invalid JSON raw, not canonicalised", req("POST", "/x", "", "application/json", `{"a":1,}`),
			req("POST", "/x", "", "application/json", `{"a":1 ,}`), false},
		{"invalid JSON differs from valid", req("POST", "/x", "", "application/json", `{"a":1}x`),
			req("POST", "/x", "", "application/json", `{"a":1}`), false},
		{"unparsable content type trimmed", req("POST", "/x", "", " not a type ", `x`),
			req("POST", "/x", "", "not a type", `x`), true},
		{"unparsable content type case kept", req("POST", "/x", "", "Not A Type", `x`),
			req("POST", "/x", "", "not a type", `x`), false},
		{"too many parameters hashed raw", req("POST", "/", strings.Repeat("a=1&", 9999)+"b=2", "", ""),
			req("POST", "/", "b=2&"+strings.Repeat("a=1&", 9999), "", ""), false},
		{"many parameters parsed", req("POST", "/", strings.Repeat("a=1&", 9998)+"b=2", "", ""),
			req("POST", "/", "b=2&"+strings.Repeat("a=1&", 9998), "", ""), true},
		{"route and method boundary", req("POS", "T/x", "", "", ""), req("POST", "/x", "", "", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa, fb := fingerprint.HTTP(tt.a), fingerprint.HTTP(tt.b)
			if (fa == fb) != tt.same {
				t.Errorf("HTTP(a) == HTTP(b) is %v, want %v\na = %+v\nb = %+v", fa == fb, tt.same, tt.a, tt.b)
			}
		})
	}
}

// TestHTTPLayout pins the "http-v2" hash input. Changing it changes every
// stored fingerprint: make a new algorithm name instead.
func TestHTTPLayout(t *testing.T) {
	field := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		return append(b, s...)
	}
	count := func(b []byte, n int) []byte { return binary.BigEndian.AppendUint64(b, uint64(n)) }
	head := func(method, route string) []byte {
		b := field(nil, "http-v2")
		b = field(b, method)
		return field(b, route)
	}

	// JSON body, parsed query and content type.
	b := head("POST", "/v1/orders")
	b = append(b, 'Q')
	b = count(b, 2)
	b = field(field(b, "currency"), "EUR")
	b = field(field(b, "dry_run"), "false")
	b = append(b, 'M')
	b = count(field(b, "application/json"), 0)
	b = append(b, 'J')
	b = field(b, `{"customer":"c_123","items":[{"qty":2,"sku":"A-1"}],"total":19.99}`)
	if got, want := fingerprint.HTTP(baseRequest), fingerprint.New("http-v2", sha256.Sum256(b)); got != want {
		t.Errorf("JSON request: HTTP = %v, want %v", got, want)
	}
	if got, want := fingerprint.HTTP(baseRequest).String(),
		"http-v2:"+hex.EncodeToString(func() []byte { s := sha256.Sum256(b); return s[:] }()); got != want {
		t.Errorf("String = %v, want %v", got, want)
	}

	// Raw query, parameters, raw bodies small and large (streamed).
	for _, size := range []int{0, 10, 16 << 10, 16<<10 + 1, 100 << 10} {
		body := bytes.Repeat([]byte{'z'}, size)
		b := head("PUT", "/files/{id}")
		b = append(b, 'q')
		b = field(b, "a=%")
		b = append(b, 'M')
		b = field(b, "text/plain")
		b = count(b, 2)
		b = field(field(b, "charset"), "utf-8")
		b = field(field(b, "format"), "Flowed")
		b = append(b, 'R')
		b = field(b, string(body))
		req := fingerprint.HTTPRequest{Method: "PUT", Route: "/files/{id}", RawQuery: "a=%",
			ContentType: "Text/Plain; format=Flowed; charset=UTF-8", Body: body}
		if got, want := fingerprint.HTTP(req), fingerprint.New("http-v2", sha256.Sum256(b)); got != want {
			t.Errorf("raw body of %d bytes: HTTP = %v, want %v", size, got, want)
		}
	}

	// An unparsable content type, a JSON type with an invalid body.
	b = head("POST", "/")
	b = append(b, 'Q')
	b = count(b, 0)
	b = append(b, 'm')
	b = field(b, "application/json; charset")
	b = append(b, 'R')
	b = field(b, `{}`)
	req := fingerprint.HTTPRequest{Method: "POST", Route: "/", ContentType: " application/json; charset ", Body: []byte(`{}`)}
	if got, want := fingerprint.HTTP(req), fingerprint.New("http-v2", sha256.Sum256(b)); got != want {
		t.Errorf("unparsable content type: HTTP = %v, want %v", got, want)
	}
}

// TestHTTPGolden pins one value outright.
func TestHTTPGolden(t *testing.T) {
	const want = "http-v2:297571237b99f236b92d380847997c7b5c41791f8f224b432061ccca8d5db534"
	if got := fingerprint.HTTP(baseRequest).String(); got != want {
		t.Errorf("HTTP(baseRequest) = %s, want %s", got, want)
	}
}

// TestHTTPQueryLikeURL checks, over many pairs of queries, that two queries
// fingerprint alike exactly when url.ParseQuery reads them alike (or, both
// refused, they are the same text).
func TestHTTPQueryLikeURL(t *testing.T) {
	queries := []string{
		"", "&", "a", "a=", "a=1", "a=1&b=2", "b=2&a=1", "a=1&a=2", "a=2&a=1", "a=1&b=2&a=2",
		"b=2&a=1&a=2", "a=%31", "%61=1", "a=1+2", "a=1%202", "a=1%2B2", "a=%", "a=%1", "a=%zz",
		"a=1;b=2", "=1", "=", "a==1", "a=1&", "&a=1", "a=1&&b=2", "A=1", "a=%C3%A9", "a=\u00e9",
		"a=1&b", "b&a=1", "a=%e9", "a=%E9", "a=%2", "a+b=c", "a%20b=c", "%zz=1", "a=1&a=1", "a=b=c", "a=b%3Dc",
	}
	for _, qa := range queries {
		for _, qb := range queries {
			fa := fingerprint.HTTP(fingerprint.HTTPRequest{RawQuery: qa})
			fb := fingerprint.HTTP(fingerprint.HTTPRequest{RawQuery: qb})
			if got, want := fa == fb, sameQuery(qa, qb); got != want {
				t.Errorf("queries %q and %q: fingerprints equal %v, want %v", qa, qb, got, want)
			}
		}
	}
}

func sameQuery(a, b string) bool {
	va, errA := url.ParseQuery(a)
	vb, errB := url.ParseQuery(b)
	if errA != nil || errB != nil {
		return errA != nil && errB != nil && a == b
	}
	return maps.EqualFunc(va, vb, func(x, y []string) bool { return reflect.DeepEqual(x, y) })
}

// TestHTTPContentTypeLikeMime checks, over many pairs of content types, that
// two content types fingerprint alike exactly when mime.ParseMediaType reads
// them alike (charset compared without case), or, both refused, they are
// the same text once trimmed.
func TestHTTPContentTypeLikeMime(t *testing.T) {
	types := []string{
		"", " ", "application/json", "Application/JSON", " application/json ", "application/json;",
		"application/json; charset=utf-8", "application/json;charset=UTF-8", `application/json; charset="utf-8"`,
		"application/json; charset=utf-16", "text/plain", "text/plain; format=flowed; charset=x",
		"text/plain; charset=x; format=flowed", "text/plain; Format=flowed; charset=X", "text",
		"text/", "/plain", "text/plain/x", "text plain", "application/json; charset",
		"application/json; a=1; a=2", "application/json; a=1; a=1", "text/\u212Aml", "text/kml",
		"text/plain; title*=us-ascii'en-us'This%20is%20%2A%2A%2Afun%2A%2A%2A",
		"text/plain; title=\"This is ***fun***\"", "application/vnd.api+json", "APPLICATION/VND.API+JSON",
		"text/plain;;", "text/plain; a=b;", "multipart/form-data; boundary=ABC", "multipart/form-data; boundary=abc",
		"application/json ; charset = utf-8", "application/json;charset=utf-8 ;", "application/json; charset=utf-8; ",
		"application/json;\tcharset=UTF-8", "application/json; CHARSET=UTF-8", "application/json; charset*=utf-8''x",
		"application/json; charset=", "application/json; =x", "text/plain; a=b c", "text/plain; a=b; ;",
		"text/plain;a=b", "text/plain; a=\"b\"", "bad type; a=b", "text/plain; a=b; c=d", "text/plain; c=d; a=b",
	}
	for _, ca := range types {
		for _, cb := range types {
			fa := fingerprint.HTTP(fingerprint.HTTPRequest{ContentType: ca})
			fb := fingerprint.HTTP(fingerprint.HTTPRequest{ContentType: cb})
			if got, want := fa == fb, sameContentType(ca, cb); got != want {
				t.Errorf("content types %q and %q: fingerprints equal %v, want %v", ca, cb, got, want)
			}
		}
	}
}

func sameContentType(a, b string) bool {
	ma, pa, errA := mime.ParseMediaType(a)
	mb, pb, errB := mime.ParseMediaType(b)
	if errA != nil || errB != nil {
		return errA != nil && errB != nil && strings.TrimSpace(a) == strings.TrimSpace(b)
	}
	for _, p := range []map[string]string{pa, pb} {
		if cs, ok := p["charset"]; ok {
			p["charset"] = strings.ToLower(cs)
		}
	}
	return ma == mb && maps.Equal(pa, pb)
}

func TestHTTPDoesNotModifyBody(t *testing.T) {
	body := []byte(`{"b":1,"a":[{"d":1,"c":2}]}`)
	orig := bytes.Clone(body)
	fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", ContentType: "application/json", Body: body})
	if !bytes.Equal(body, orig) {
		t.Errorf("body modified: %s", body)
	}
}

func TestHTTPConcurrent(t *testing.T) {
	want := fingerprint.HTTP(baseRequest)
	done := make(chan bool)
	for range 8 {
		go func() {
			ok := true
			for range 200 {
				ok = ok && fingerprint.HTTP(baseRequest) == want
				_, err := fingerprint.CanonicalJSON([]byte(`{"z":[1,{"y":2,"x":1}],"a":"\u00e9"}`))
				ok = ok && err == nil
			}
			done <- ok
		}()
	}
	for range 8 {
		if !<-done {
			t.Error("concurrent fingerprints disagree")
		}
	}
}

// modelHTTP is an independent model of HTTP, built on url.ParseQuery and
// mime.ParseMediaType, for differential tests (TestHTTPModel, FuzzHTTP).
func modelHTTP(r fingerprint.HTTPRequest) fingerprint.Fingerprint {
	field := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		return append(b, s...)
	}
	count := func(b []byte, n int) []byte { return binary.BigEndian.AppendUint64(b, uint64(n)) }
	b := field(nil, "http-v2")
	b = field(b, r.Method)
	b = field(b, r.Route)
	if v, err := url.ParseQuery(r.RawQuery); err == nil {
		n := 0
		for _, vs := range v {
			n += len(vs)
		}
		b = count(append(b, 'Q'), n)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			for _, val := range v[k] {
				b = field(field(b, k), val)
			}
		}
	} else {
		b = field(append(b, 'q'), r.RawQuery)
	}
	isJSON := false
	if mt, params, err := mime.ParseMediaType(r.ContentType); err == nil {
		b = field(append(b, 'M'), mt)
		b = count(b, len(params))
		for _, k := range slices.Sorted(maps.Keys(params)) {
			val := params[k]
			if k == "charset" {
				val = strings.ToLower(val)
			}
			b = field(field(b, k), val)
		}
		_, sub, ok := strings.Cut(mt, "/")
		isJSON = ok && (mt == "application/json" || strings.HasSuffix(sub, "+json"))
	} else {
		b = field(append(b, 'm'), strings.TrimSpace(r.ContentType))
	}
	if isJSON {
		if c, err := fingerprint.CanonicalJSON(r.Body); err == nil {
			return fingerprint.New("http-v2", sha256.Sum256(field(append(b, 'J'), string(c))))
		}
	}
	return fingerprint.New("http-v2", sha256.Sum256(field(append(b, 'R'), string(r.Body))))
}

func TestHTTPModel(t *testing.T) {
	reqs := []fingerprint.HTTPRequest{baseRequest, {}}
	for _, q := range []string{"", "a=1&b=2&a=0", "x=%zz", "k;v", "+=+&%20"} {
		for _, ct := range []string{"", "application/json", "Application/Problem+JSON; charset=UTF-8", "text/plain; b=2; a=1", "bad type", "text/\u212Aml+json"} {
			for _, body := range []string{"", `{"b":1,"a":2}`, `[1,2,]`, "plain text"} {
				reqs = append(reqs, fingerprint.HTTPRequest{Method: "PATCH", Route: "/r/{id}", RawQuery: q, ContentType: ct, Body: []byte(body)})
			}
		}
	}
	for _, r := range reqs {
		if got, want := fingerprint.HTTP(r), modelHTTP(r); got != want {
			t.Errorf("HTTP(%+v) = %v, model says %v", r, got, want)
		}
	}
}

// TestHTTPCaseVariantMemberOrderIsADifference: {"amount":1,"Amount":1000}
// is a charge of 1000 to a Go handler (encoding/json matches both names to
// an Amount field, the last one winning), {"Amount":1000,"amount":1} a
// charge of 1: the two never share a fingerprint, while the same members
// with only another one moved do.
func TestHTTPCaseVariantMemberOrderIsADifference(t *testing.T) {
	req := func(body string) fingerprint.HTTPRequest {
		return fingerprint.HTTPRequest{Method: "POST", Route: "/payments", ContentType: "application/json", Body: []byte(body)}
	}
	var a, b struct{ Amount int }
	if err := json.Unmarshal([]byte(`{"amount":1,"Amount":1000}`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"Amount":1000,"amount":1}`), &b); err != nil {
		t.Fatal(err)
	}
	if a.Amount != 1000 || b.Amount != 1 {
		t.Fatalf("encoding/json read %d and %d; want 1000 and 1", a.Amount, b.Amount)
	}
	if fingerprint.HTTP(req(`{"amount":1,"Amount":1000}`)) == fingerprint.HTTP(req(`{"Amount":1000,"amount":1}`)) {
		t.Error("a charge of 1000 and a charge of 1 share a fingerprint")
	}
	if fingerprint.HTTP(req(`{"amount":1,"Amount":1000,"currency":"eur"}`)) != fingerprint.HTTP(req(`{"currency":"eur","amount":1,"Amount":1000}`)) {
		t.Error("moving another member changed the fingerprint")
	}
}
