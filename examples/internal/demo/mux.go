package demo

import (
	"net/http"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// NetHTTP returns the demo service on net/http: POST /orders and POST
// /checkout guarded with a required key, POST /notes guarded with an
// optional key, GET /stats unguarded, all behind [Authenticate], and the keys scoped by principal
// ([Scope]).
func NetHTTP(s *Service, guard *middleware.Guard, opts ...nethttp.Option) (http.Handler, error) {
	opts = append([]nethttp.Option{nethttp.WithScope(Scope)}, opts...)
	required, err := nethttp.New(guard, append(opts, nethttp.WithKeyRequired(true))...)
	if err != nil {
		return nil, err
	}
	optional, err := nethttp.New(guard, opts...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", required(s.Business()))
	mux.Handle("POST /notes", optional(s.Business()))
	mux.Handle("POST /checkout", required(s.Checkout()))
	mux.Handle("GET /stats", s.Stats())
	return Authenticate(mux), nil
}

// HTTPServer returns the http.Server the demos serve h with: a 10-second
// ReadHeaderTimeout, defaults otherwise.
func HTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
}
