package nethttp

import (
	"bufio"
	"net"
	"net/http"
)

// Capture is the ResponseWriter a guarded handler writes to. It passes
// everything through to the real writer at once (streaming works) and keeps
// a copy of the status, the replayable headers and the body for the record.
//
// Edge cases, defined once: the status is the first non-1xx code written (a
// missing WriteHeader means 200); 1xx codes other than 101 are passed
// through and not recorded; a repeated WriteHeader is ignored; a flushed,
// hijacked (or 101) response, or one larger than the capture limit, is
// delivered and marked not replayable.
//
// Capture implements Unwrap, so http.ResponseController reaches the real
// writer's deadlines and full-duplex switch. It advertises http.Flusher,
// http.Hijacker and http.Pusher exactly when the real writer does, never
// more (see [NewCapture]).
type Capture struct {
	w         http.ResponseWriter
	keep      func(name string) bool
	limit     int
	status    int
	header    http.Header // the replayable headers, as they were when the status was written
	body      []byte
	wrote     bool
	flushed   bool
	hijacked  bool
	overLimit bool
	marked    bool // MarkNotReplayable was called
}

// NewCapture wraps w. keep selects the headers worth recording; limit
// bounds the recorded body (beyond it the response is still delivered but
// not replayable; limit <= 0: no limit). The returned writer is the Capture
// itself or a wrapper of it that adds exactly the optional interfaces
// (Flusher, Hijacker, Pusher) w has; use [CaptureOf] to get the Capture back.
func NewCapture(w http.ResponseWriter, keep func(name string) bool, limit int) (http.ResponseWriter, *Capture) {
	c := &Capture{w: w, keep: keep, limit: limit}
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	switch {
	case f && h && p:
		return struct {
			*Capture
			flusher
			hijacker
			pusher
		}{c, flusher{c}, hijacker{c}, pusher{c}}, c
	case f && h:
		return struct {
			*Capture
			flusher
			hijacker
		}{c, flusher{c}, hijacker{c}}, c
	case f && p:
		return struct {
			*Capture
			flusher
			pusher
		}{c, flusher{c}, pusher{c}}, c
	case h && p:
		return struct {
			*Capture
			hijacker
			pusher
		}{c, hijacker{c}, pusher{c}}, c
	case f:
		return struct {
			*Capture
			flusher
		}{c, flusher{c}}, c
	case h:
		return struct {
			*Capture
			hijacker
		}{c, hijacker{c}}, c
	case p:
		return struct {
			*Capture
			pusher
		}{c, pusher{c}}, c
	}
	return c, c
}

// Header returns the real writer's header map.
func (c *Capture) Header() http.Header { return c.w.Header() }

// WriteHeader records the first non-1xx status and passes it on.
func (c *Capture) WriteHeader(code int) {
	if c.wrote || c.hijacked {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		c.w.WriteHeader(code)
		return
	}
	c.wrote = true
	c.status = code
	c.header = make(http.Header)
	for name, values := range c.w.Header() {
		if c.keep(name) {
			c.header[name] = append([]string(nil), values...)
		}
	}
	c.w.WriteHeader(code)
}

// Write passes p on and keeps a copy, up to the capture limit.
func (c *Capture) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	if !c.overLimit {
		if c.limit > 0 && len(c.body)+len(p) > c.limit {
			c.overLimit, c.body = true, nil
		} else {
			c.body = append(c.body, p...)
		}
	}
	return c.w.Write(p)
}

func (c *Capture) captureOf() *Capture { return c }

// Unwrap returns the real writer, for http.ResponseController.
func (c *Capture) Unwrap() http.ResponseWriter { return c.w }

// Status returns the recorded status: 0 before anything was written.
func (c *Capture) Status() int { return c.status }

// Written reports whether the status has been written.
func (c *Capture) Written() bool { return c.wrote }

// Replayable reports whether the response can be recorded for replay: it
// was not flushed, hijacked or switched to another protocol, its body fits
// the capture limit, and nobody called [Capture.MarkNotReplayable].
func (c *Capture) Replayable() bool {
	return !c.flushed && !c.hijacked && !c.overLimit && !c.marked && c.status != http.StatusSwitchingProtocols
}

// MarkNotReplayable declares that what the capture holds is not what the
// client gets, so it must not be replayed: the request is recorded as
// executed-not-replayable (if the store policy records its status at all),
// and a retry gets 409 response-not-replayable without running the handler
// again. An adapter calls it when its framework answers outside the
// capture, such as a gin middleware in front of the guard that renders
// c.Errors after the chain returns.
func (c *Capture) MarkNotReplayable() { c.marked = true }

// Hijacked reports whether the handler took over the connection.
func (c *Capture) Hijacked() bool { return c.hijacked }

// Response returns the recorded status, replayable headers and body.
func (c *Capture) Response() (status int, header http.Header, body []byte) {
	return c.status, c.header, c.body
}

type flusher struct{ c *Capture }

// Flush marks the response streamed and flushes the real writer.
func (f flusher) Flush() {
	if !f.c.wrote {
		f.c.WriteHeader(http.StatusOK)
	}
	f.c.flushed = true
	f.c.w.(http.Flusher).Flush()
}

type hijacker struct{ c *Capture }

// Hijack marks the response not replayable and hands over the connection.
func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := h.c.w.(http.Hijacker).Hijack()
	if err == nil {
		h.c.hijacked = true
	}
	return conn, rw, err
}

type pusher struct{ c *Capture }

// Push passes an HTTP/2 server push on; it does not affect the record.
func (p pusher) Push(target string, opts *http.PushOptions) error {
	return p.c.w.(http.Pusher).Push(target, opts)
}

// CaptureOf returns the Capture behind a writer made by [NewCapture], or
// nil.
func CaptureOf(w http.ResponseWriter) *Capture {
	for {
		switch x := w.(type) {
		case interface{ captureOf() *Capture }:
			return x.captureOf()
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}
