package memstore_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestFullStoreOverHTTP: over HTTP, a request whose key a full store
// refuses is answered 503 with Retry-After, a problem the client may retry,
// and its handler never runs; the keys the store holds still replay.
func TestFullStoreOverHTTP(t *testing.T) {
	const maxEntries = 10
	guard := newGuard(t, memstore.New(memstore.WithMaxEntries(maxEntries)))
	idem, err := nethttp.New(guard)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv := httptest.NewServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, n)
	})))
	defer srv.Close()

	type answer struct {
		status int
		header http.Header
		body   string
	}
	post := func(i int) answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", strconv.Quote(keyOf(i)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header, string(body)}
	}

	for i := range maxEntries {
		if a := post(i); a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("key %d: %d %q; want 201, executed", i, a.status, a.body)
		}
	}
	a := post(maxEntries)
	if a.status != http.StatusServiceUnavailable {
		t.Fatalf("a new key at the full store: %d %q; want 503", a.status, a.body)
	}
	if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s <= 0 {
		t.Fatalf("Retry-After %q; want a number of seconds", a.header.Get("Retry-After"))
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q; want a problem", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal([]byte(a.body), &p); err != nil || p.Status != http.StatusServiceUnavailable || !strings.HasSuffix(p.Type, "idempotency-unavailable") {
		t.Fatalf("problem %q (%v); want type %s, status 503", a.body, err, "idempotency-unavailable")
	}
	if n := runs.Load(); n != maxEntries {
		t.Fatalf("the handler ran %d times; want %d (never for the refused key)", n, maxEntries)
	}
	if a := post(0); a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" || a.body != `{"order":1}` {
		t.Fatalf("a held key at the full store: %d %q replayed=%q; want its replay", a.status, a.body, a.header.Get("Idempotent-Replayed"))
	}
}
