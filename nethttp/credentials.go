package nethttp

import (
	"net/http"
	"strings"

	"github.com/idemkit/idemkit/middleware"
)

// credentials binds a request without a scope hook to what identifies its
// caller, in a fixed order: its Authorization and Cookie header lines,
// the client certificate its TLS connection presented (the leaf's DER
// bytes), and the lines of each header named by WithCredentialHeaders.
// Each header's lines are joined by a line feed (which no field value
// holds), and an absent header or certificate counts as empty; a request
// with none of them is bound to having no credentials at all.
func (c *core) credentials(r *http.Request) middleware.CallOption {
	h := r.Header
	auth, cookie := h["Authorization"], h["Cookie"]
	var cert string
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cert = string(r.TLS.PeerCertificates[0].Raw)
	}
	none := auth == nil && cookie == nil && cert == ""
	for _, name := range c.cfg.credentialHeaders {
		none = none && h[name] == nil
	}
	if none {
		return anonymous
	}
	values := make([]string, 3, 3+len(c.cfg.credentialHeaders))
	values[0], values[1], values[2] = strings.Join(auth, "\n"), strings.Join(cookie, "\n"), cert
	for _, name := range c.cfg.credentialHeaders {
		values = append(values, strings.Join(h[name], "\n"))
	}
	return middleware.Credentials(values...)
}

// anonymous is the binding option of a request without credentials.
var anonymous = middleware.Credentials()
