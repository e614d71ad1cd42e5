package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: it issues servers' and
// clients' certificates for mutual TLS, and Pool verifies them.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// NewCA makes a CA with a fresh P-256 key, valid for an hour either side of
// now.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca := &CA{}
	ca.cert, ca.key = ca.issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "idemkit test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	ca.pool = x509.NewCertPool()
	ca.pool.AddCert(ca.cert)
	return ca
}

// Pool returns a pool holding only the CA's certificate: a server's
// ClientCAs, a client's RootCAs.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// Server issues a server certificate for the loopback addresses.
func (ca *CA) Server(t testing.TB) tls.Certificate {
	t.Helper()
	return ca.leaf(t, "server", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
}

// Client issues a client certificate whose common name is name, with a key
// of its own.
func (ca *CA) Client(t testing.TB, name string) tls.Certificate {
	t.Helper()
	return ca.leaf(t, name, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) leaf(t testing.TB, name string, use x509.ExtKeyUsage, ips ...net.IP) tls.Certificate {
	t.Helper()
	cert, key := ca.issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{use}, IPAddresses: ips,
	})
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// issue signs tmpl with a fresh P-256 key (self-signed while ca has no
// certificate yet) and returns the certificate and its key.
func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)); err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if ca.cert != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
