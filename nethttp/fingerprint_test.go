package nethttp_test

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/internal/httpsuite"
)

// TestEscapedSlashesAreDifferentRoutes: ServeMux routes on the escaped
// path, so /transfer/a%2Fb/c (from "a/b") and /transfer/a/b%2Fc (to "b/c")
// are different transfers, whose decoded paths are one.
func TestEscapedSlashesAreDifferentRoutes(t *testing.T) {
	var runs atomic.Int32
	mw := idem(t, httpsuite.NewGuard(t))
	mux := http.NewServeMux()
	mux.Handle("POST /transfer/{from}/{to}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"from": r.PathValue("from"), "to": r.PathValue("to")})
	})))
	httpsuite.CheckEscapedSlashes(t, httpsuite.Serve(t, mux), runs.Load)
}

// TestCaseVariantMembersAreDifferentBodies: a handler decoding into a
// struct with an Amount field reads {"amount":1,"Amount":1000} as 1000 and
// {"Amount":1000,"amount":1} as 1; one never replays the other.
func TestCaseVariantMembersAreDifferentBodies(t *testing.T) {
	var runs atomic.Int32
	mw := idem(t, httpsuite.NewGuard(t))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/pay", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		var in struct{ Amount int }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"paid": r.PathValue("id"), "amount": in.Amount})
	})))
	httpsuite.CheckCaseVariantMembers(t, httpsuite.Serve(t, mux), runs.Load)
}
