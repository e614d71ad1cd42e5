package grpcinterceptor

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// metadataCapture is what the handler's header and trailer metadata are
// recorded by.
type metadataCapture interface {
	recorded() (header, trailer metadata.MD)
}

// metadataReader is the part of grpc-go's own server stream
// (*transport.ServerStream, in an internal package, so reached by its
// method set) that reports the header and trailer metadata set on it so
// far.
type metadataReader interface {
	grpc.ServerTransportStream
	Header() (metadata.MD, error)
	Trailer() metadata.MD
}

// newMetadataCapture prepares the recording of what the handler sets on
// real, and returns the context the handler runs with. When the real
// stream reports its metadata (grpc-go's does), it stays in the context:
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors, which need
// grpc-go's own stream, keep working, and what the handler set is read
// back afterwards. Otherwise the handler gets a [captureStream] in front of
// it.
func newMetadataCapture(ctx context.Context, keep func(string) bool) (context.Context, metadataCapture) {
	stream := grpc.ServerTransportStreamFromContext(ctx)
	if r, ok := stream.(metadataReader); ok {
		h, _ := r.Header()
		return ctx, &streamDiff{stream: r, keep: keep, header: h, trailer: r.Trailer()}
	}
	cs := &captureStream{ServerTransportStream: stream, keep: keep}
	if stream == nil {
		return ctx, cs
	}
	return grpc.NewContextWithServerTransportStream(ctx, cs), cs
}

// streamDiff records what was added to a stream's metadata since it was
// made: the stream's header and trailer then, against theirs at the end.
// The transport merges repeated calls by appending values, so what was
// added is, per key, the values past those there before.
type streamDiff struct {
	stream          metadataReader
	keep            func(key string) bool
	header, trailer metadata.MD // at the start
}

// recorded returns the metadata added since the start.
func (d *streamDiff) recorded() (header, trailer metadata.MD) {
	h, _ := d.stream.Header()
	return added(d.header, h, d.keep), added(d.trailer, d.stream.Trailer(), d.keep)
}

// added returns what now has past before, leaving out what a replay must
// not repeat.
func added(before, now metadata.MD, keep func(string) bool) metadata.MD {
	var out metadata.MD
	for k, vs := range now {
		k = strings.ToLower(k)
		vs = vs[min(len(before[k]), len(vs)):]
		if len(vs) == 0 || reservedKey(k) || (keep != nil && !keep(k)) {
			continue
		}
		if out == nil {
			out = make(metadata.MD, len(now))
		}
		out[k] = append(out[k], vs...)
	}
	return out
}

// captureStream is the grpc.ServerTransportStream a guarded handler sees
// when the real stream cannot report its metadata: it passes SetHeader,
// SendHeader and SetTrailer on to the real stream at once and records the
// metadata of the calls that succeeded, for replay. Method comes from the
// real stream too.
type captureStream struct {
	grpc.ServerTransportStream // the real stream
	keep                       func(key string) bool

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

var (
	_ grpc.ServerTransportStream = (*captureStream)(nil)
	_ metadataCapture            = (*captureStream)(nil)
	_ metadataCapture            = (*streamDiff)(nil)
)

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

// reservedKey reports keys that are never recorded nor replayed: the
// transport's own (grpc-*, pseudo-headers), the replay marker and
// credentials.
func reservedKey(k string) bool {
	return k == "" || k[0] == ':' || strings.HasPrefix(k, "grpc-") || k == replayedMetadataKey || credentialKey(k)
}

// credentialKey reports metadata keys that carry credentials, in any case:
// they never reach the backend nor another call.
func credentialKey(k string) bool {
	for _, c := range [...]string{"authorization", "proxy-authorization", "cookie", "set-cookie"} {
		if strings.EqualFold(k, c) {
			return true
		}
	}
	return false
}

// withoutCredentials removes the credential keys from md, a recorded
// block about to be replayed (records written before credentials were
// left out of them may hold some).
func withoutCredentials(md metadata.MD) {
	for k := range md {
		if credentialKey(k) {
			delete(md, k)
		}
	}
}
