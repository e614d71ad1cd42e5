package grpcinterceptor

import (
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// captureStream is the grpc.ServerTransportStream a guarded handler sees:
// it passes SetHeader, SendHeader and SetTrailer on to the real stream at
// once and records the metadata of the calls that succeeded, for replay.
// Method comes from the real stream too.
type captureStream struct {
	grpc.ServerTransportStream // the real stream
	keep                       func(key string) bool

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

var _ grpc.ServerTransportStream = (*captureStream)(nil)

// SetHeader passes md on and records it.
func (c *captureStream) SetHeader(md metadata.MD) error {
	if err := c.ServerTransportStream.SetHeader(md); err != nil {
		return err
	}
	c.record(&c.header, md)
	return nil
}

// SendHeader passes md on and records it with the header.
func (c *captureStream) SendHeader(md metadata.MD) error {
	if err := c.ServerTransportStream.SendHeader(md); err != nil {
		return err
	}
	c.record(&c.header, md)
	return nil
}

// SetTrailer passes md on and records it.
func (c *captureStream) SetTrailer(md metadata.MD) error {
	if err := c.ServerTransportStream.SetTrailer(md); err != nil {
		return err
	}
	c.record(&c.trailer, md)
	return nil
}

// record merges md into *dst, as the transport merges repeated calls,
// leaving out what a replay must not repeat.
func (c *captureStream) record(dst *metadata.MD, md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, vs := range md {
		k = strings.ToLower(k)
		if len(vs) == 0 || reservedKey(k) || (c.keep != nil && !c.keep(k)) {
			continue
		}
		if *dst == nil {
			*dst = make(metadata.MD, len(md))
		}
		(*dst)[k] = append((*dst)[k], vs...)
	}
}

// recorded returns the metadata recorded so far.
func (c *captureStream) recorded() (header, trailer metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header, c.trailer
}

// reservedKey reports keys a replay never repeats: the transport's own
// (grpc-*, pseudo-headers) and the replay marker.
func reservedKey(k string) bool {
	return k == "" || k[0] == ':' || strings.HasPrefix(k, "grpc-") || k == ReplayedMetadataKey
}
