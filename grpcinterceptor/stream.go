package grpcinterceptor

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/middleware"
)

// metadataCapture is what the handler's header and trailer metadata are
// recorded by.
type metadataCapture interface {
	recorded() (header, trailer metadata.MD)
}

// metadataReader is the method set of grpc-go's own server stream (in an
// internal package) that reports the metadata set on it so far.
type metadataReader interface {
	grpc.ServerTransportStream
	Header() (metadata.MD, error)
	Trailer() metadata.MD
}

// newMetadataCapture prepares the recording of what the handler sets on
// real and returns the handler's context. grpc-go's stream, which reports
// its metadata, stays in the context (so grpc.SetSendCompressor keeps
// working) and is read back afterwards; any other gets a [captureStream]
// in front. When the work can begin a transaction that commits with its
// outcome, what the handler sets once it began one is held (held is nil
// when it cannot; see [heldStream]).
func newMetadataCapture(ctx context.Context, keep func(string) bool) (context.Context, metadataCapture, *heldStream) {
	stream := grpc.ServerTransportStreamFromContext(ctx)
	var held *heldStream
	if _, can := middleware.TransactionBegun(ctx); can && stream != nil {
		held = &heldStream{ServerTransportStream: stream, began: func() bool {
			begun, _ := middleware.TransactionBegun(ctx)
			return begun
		}}
	}
	if r, ok := stream.(metadataReader); ok {
		h, _ := r.Header()
		d := &streamDiff{stream: r, keep: keep, header: h, trailer: r.Trailer(), held: held}
		if held == nil {
			return ctx, d, nil
		}
		return &heldContext{Context: ctx, held: held}, d, held
	}
	cs := &captureStream{ServerTransportStream: stream, keep: keep, held: held}
	if stream == nil {
		return ctx, cs, nil
	}
	return grpc.NewContextWithServerTransportStream(ctx, cs), cs, held
}

// streamDiff records what was added to a stream's metadata since it was
// made (the transport appends the values of repeated calls), and then
// what was held.
type streamDiff struct {
	stream          metadataReader
	keep            func(key string) bool
	header, trailer metadata.MD // at the start
	held            *heldStream // nil when the work can begin no transaction
}

// recorded returns the metadata added since the start.
func (d *streamDiff) recorded() (header, trailer metadata.MD) {
	h, _ := d.stream.Header()
	header, trailer = added(d.header, h, d.keep), added(d.trailer, d.stream.Trailer(), d.keep)
	if d.held != nil {
		hh, ht := d.held.held()
		header, trailer = appendKept(header, hh, d.keep), appendKept(trailer, ht, d.keep)
	}
	return header, trailer
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

// captureStream is the grpc.ServerTransportStream a handler sees when the
// real stream cannot report its metadata: it passes the calls on (to held
// in the transactional mode) and records those that succeeded.
type captureStream struct {
	grpc.ServerTransportStream // the real stream
	keep                       func(key string) bool
	held                       *heldStream // nil when the work can begin no transaction

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

var (
	_ grpc.ServerTransportStream = (*captureStream)(nil)
	_ grpc.ServerTransportStream = (*heldStream)(nil)
	_ metadataCapture            = (*captureStream)(nil)
	_ metadataCapture            = (*streamDiff)(nil)
)

func (c *captureStream) SetHeader(md metadata.MD) error {
	if err := c.next().SetHeader(md); err != nil {
		return err
	}
	c.record(&c.header, md)
	return nil
}

func (c *captureStream) SendHeader(md metadata.MD) error {
	if err := c.next().SendHeader(md); err != nil {
		return err
	}
	c.record(&c.header, md)
	return nil
}

func (c *captureStream) SetTrailer(md metadata.MD) error {
	if err := c.next().SetTrailer(md); err != nil {
		return err
	}
	c.record(&c.trailer, md)
	return nil
}

// next returns where the handler's calls go: the real stream, or held
// once the work began its transaction.
func (c *captureStream) next() grpc.ServerTransportStream {
	if c.held != nil && c.held.began() {
		return c.held
	}
	return c.ServerTransportStream
}

// record merges md into *dst, as the transport merges repeated calls,
// leaving out what a replay must not repeat.
func (c *captureStream) record(dst *metadata.MD, md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*dst = appendKept(*dst, md, c.keep)
}

// appendKept merges md into dst (made when nil), leaving out what a replay
// must not repeat, and returns it.
func appendKept(dst, md metadata.MD, keep func(string) bool) metadata.MD {
	for k, vs := range md {
		k = strings.ToLower(k)
		if len(vs) == 0 || reservedKey(k) || (keep != nil && !keep(k)) {
			continue
		}
		if dst == nil {
			dst = make(metadata.MD, len(md))
		}
		dst[k] = append(dst[k], vs...)
	}
	return dst
}

// recorded returns the metadata recorded so far.
func (c *captureStream) recorded() (header, trailer metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header, c.trailer
}

// heldStream holds back the metadata a handler sets once its work began a
// transaction that commits with its outcome, as nethttp holds a response:
// the interceptor sends it ([heldStream.send]) once the commit landed, and
// drops it when it failed.
type heldStream struct {
	grpc.ServerTransportStream             // the real stream
	began                      func() bool // whether the work began its transaction

	mu              sync.Mutex
	header, trailer metadata.MD
	sent            bool // SendHeader was called
}

// errHeaderSent is what grpc-go's stream answers a header set or sent
// after the header went out.
var errHeaderSent = status.Error(codes.Internal, "grpcinterceptor: the header was already sent")

func (h *heldStream) SetHeader(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sent {
		return errHeaderSent
	}
	h.header = metadata.Join(h.header, md)
	return nil
}

func (h *heldStream) SendHeader(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sent {
		return errHeaderSent
	}
	h.header, h.sent = metadata.Join(h.header, md), true
	return nil
}

func (h *heldStream) SetTrailer(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trailer = metadata.Join(h.trailer, md)
	return nil
}

// held returns the metadata held so far.
func (h *heldStream) held() (header, trailer metadata.MD) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.header, h.trailer
}

// send passes the held metadata on to the real stream once the work's
// transaction committed: the header (sent if the handler sent it), then
// the trailer. An error means the transport went away: the answer that
// follows fails as it would have.
func (h *heldStream) send() {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.sent:
		_ = h.ServerTransportStream.SendHeader(h.header)
	case h.header.Len() > 0:
		_ = h.ServerTransportStream.SetHeader(h.header)
	}
	if h.trailer.Len() > 0 {
		_ = h.ServerTransportStream.SetTrailer(h.trailer)
	}
	h.header, h.trailer, h.sent = nil, nil, false
}

// heldContext is the handler's context in the transactional mode with
// grpc-go's stream in it: it answers that stream until the work began its
// transaction (so grpc.SetSendCompressor works until then), and held from
// then on.
type heldContext struct {
	context.Context
	held *heldStream
}

// Value answers held in place of the real stream once the work began its
// transaction, and the parent's values otherwise.
func (c *heldContext) Value(key any) any {
	v := c.Context.Value(key)
	if s, ok := v.(grpc.ServerTransportStream); ok && s == c.held.ServerTransportStream && c.held.began() {
		return c.held
	}
	return v
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

// withoutCredentials removes the credential keys from a recorded block
// about to be replayed (older records may hold some).
func withoutCredentials(md metadata.MD) {
	for k := range md {
		if credentialKey(k) {
			delete(md, k)
		}
	}
}
