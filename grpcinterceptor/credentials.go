package grpcinterceptor

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/idemkit/idemkit/middleware"
)

// credentials binds a call without a scope hook to its "authorization"
// metadata, the leaf client certificate its TLS connection presented and
// the metadata WithCredentialMetadata names, in that order; values are
// joined by a line feed, which text metadata never holds, and absent ones
// count as empty.
func (s *server) credentials(ctx context.Context) middleware.CallOption {
	// Only the keys bound are read: FromIncomingContext would copy all of
	// the call's metadata.
	auth := metadata.ValueFromIncomingContext(ctx, credentialsMetadataKey)
	cert := peerCertificate(ctx)
	none := len(auth) == 0 && cert == ""
	var extra [][]string
	if len(s.cfg.credentialMD) > 0 {
		extra = make([][]string, len(s.cfg.credentialMD))
		for i, k := range s.cfg.credentialMD {
			extra[i] = metadata.ValueFromIncomingContext(ctx, k)
			none = none && len(extra[i]) == 0
		}
	}
	if none {
		return anonymous
	}
	values := make([]string, 2, 2+len(extra))
	values[0], values[1] = strings.Join(auth, "\n"), cert
	for _, v := range extra {
		values = append(values, strings.Join(v, "\n"))
	}
	return middleware.Credentials(values...)
}

// anonymous is the binding option of a call without credentials.
var anonymous = middleware.Credentials()

// peerCertificate returns the DER bytes of the client certificate the
// call's TLS connection presented, or "" without one.
func peerCertificate(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	return string(info.State.PeerCertificates[0].Raw)
}

// validateCredentials returns why the WithCredentialMetadata keys are
// wrong; it drops duplicates and keeps them all out of the record.
func (c *config) validateCredentials() (string, bool) {
	if !c.credentialMDSet {
		return "", true
	}
	switch {
	case c.scope != nil:
		return "WithCredentialMetadata binds calls only without a scope hook, and WithScope is set: " +
			"drop WithCredentialMetadata, or make the scope hook name the principal that metadata identifies", false
	case len(c.credentialMD) == 0:
		return `WithCredentialMetadata needs at least one metadata key, such as "x-api-key"`, false
	}
	var keys []string
	for _, k := range c.credentialMD {
		if !validMetadataKey(k) {
			return "WithCredentialMetadata: " + strconv.Quote(k) + ` cannot name text metadata (1 or more of [0-9a-z-_.], not -bin, not grpc-), such as "x-api-key"`, false
		}
		if k != credentialsMetadataKey && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	c.credentialMD = keys
	keep := c.keepMetadata
	c.keepMetadata = func(k string) bool {
		return !slices.Contains(keys, k) && (keep == nil || keep(k))
	}
	return "", true
}
