package httpsuite

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
)

// serveMutualTLS serves h over TLS on a real loopback listener until the
// test ends, verifying the client certificates ca issued (a client
// without one is served too, as by an API that also takes tokens). It
// returns the base URL and a function that makes a client presenting
// cert (none when nil) and trusting the server.
func serveMutualTLS(t *testing.T, h http.Handler, ca *testenv.CA) (string, func(cert tls.Certificate) *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, func(cert tls.Certificate) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if cert.Certificate != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
}
