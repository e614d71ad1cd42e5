package demo

import (
	"net/http"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// NetHTTP returns the demo service on net/http: POST /orders guarded with a
// required key, POST /notes guarded with an optional key, GET /stats
// unguarded.
func NetHTTP(s *Service, guard *middleware.Guard, opts ...nethttp.Option) (http.Handler, error) {
	required, err := nethttp.NewCore(guard, append(opts, nethttp.WithKeyRequired(true))...)
	if err != nil {
		return nil, err
	}
	optional, err := nethttp.NewCore(guard, opts...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", required.Middleware()(s.Business()))
	mux.Handle("POST /notes", optional.Middleware()(s.Business()))
	mux.Handle("GET /stats", s.Stats())
	return mux, nil
}
