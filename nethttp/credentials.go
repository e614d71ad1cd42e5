package nethttp

import (
	"net/http"
	"strings"

	"github.com/idemkit/idemkit/middleware"
)

// credentials binds a request without a scope hook to its Authorization
// and Cookie lines, the leaf client certificate of its TLS connection and
// the headers WithCredentialHeaders names, in that order; lines are joined
// by a line feed, which no field value holds, and absent ones count as
// empty.
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
