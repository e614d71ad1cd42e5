package nethttp

import (
	"bufio"
	"net"
	"net/http"
)

// capture is the ResponseWriter a guarded handler writes to. It passes
// everything through to the real writer at once (streaming works) and keeps
// a copy of the status, the replayable headers and the body for the record.
//
// Edge cases, defined once: the status is the first non-1xx code written (a
// missing WriteHeader means 200); 1xx codes other than 101 are passed
// through and not recorded; a repeated WriteHeader is ignored; a flushed,
// hijacked (or 101) response, or one larger than the capture limit, is
// delivered and marked not replayable.
//
// capture implements Unwrap, so http.ResponseController reaches the real
// writer's deadlines and full-duplex switch. It advertises http.Flusher,
// http.Hijacker and http.Pusher exactly when the real writer does, never
// more (see newCapture).
type capture struct {
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

// newCapture wraps w. keep selects the headers worth recording; limit
// bounds the recorded body (beyond it the response is still delivered but
// not replayable; limit <= 0: no limit). The returned writer is the capture
// itself or a wrapper of it that adds exactly the optional interfaces
// (Flusher, Hijacker, Pusher) w has; captureOf gets the capture back.
func newCapture(w http.ResponseWriter, keep func(name string) bool, limit int) (http.ResponseWriter, *capture) {
	c := &capture{w: w, keep: keep, limit: limit}
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	switch {
	case f && h && p:
		return struct {
			*capture
			flusher
			hijacker
			pusher
		}{c, flusher{c}, hijacker{c}, pusher{c}}, c
	case f && h:
		return struct {
			*capture
			flusher
			hijacker
		}{c, flusher{c}, hijacker{c}}, c
	case f && p:
		return struct {
			*capture
			flusher
			pusher
		}{c, flusher{c}, pusher{c}}, c
	case h && p:
		return struct {
			*capture
			hijacker
			pusher
		}{c, hijacker{c}, pusher{c}}, c
	case f:
		return struct {
			*capture
			flusher
		}{c, flusher{c}}, c
	case h:
		return struct {
			*capture
			hijacker
		}{c, hijacker{c}}, c
	case p:
		return struct {
			*capture
			pusher
		}{c, pusher{c}}, c
	}
	return c, c
}

// Header returns the real writer's header map.
func (c *capture) Header() http.Header { return c.w.Header() }

// WriteHeader records the first non-1xx status and passes it on.
func (c *capture) WriteHeader(code int) {
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
func (c *capture) Write(p []byte) (int, error) {
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

func (c *capture) self() *capture { return c }

// Unwrap returns the real writer, for http.ResponseController.
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

// replayable reports whether the response can be recorded for replay: it
// was not flushed, hijacked or switched to another protocol, its body fits
// the capture limit, and nobody called [MarkNotReplayable].
func (c *capture) replayable() bool {
	return !c.flushed && !c.hijacked && !c.overLimit && !c.marked && c.status != http.StatusSwitchingProtocols
}

// recorded returns the recorded status, replayable headers and body.
func (c *capture) recorded() (status int, header http.Header, body []byte) {
	return c.status, c.header, c.body
}

type flusher struct{ c *capture }

// Flush marks the response streamed and flushes the real writer.
func (f flusher) Flush() {
	if !f.c.wrote {
		f.c.WriteHeader(http.StatusOK)
	}
	f.c.flushed = true
	f.c.w.(http.Flusher).Flush()
}

type hijacker struct{ c *capture }

// Hijack marks the response not replayable and hands over the connection.
func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := h.c.w.(http.Hijacker).Hijack()
	if err == nil {
		h.c.hijacked = true
	}
	return conn, rw, err
}

type pusher struct{ c *capture }

// Push passes an HTTP/2 server push on; it does not affect the record.
func (p pusher) Push(target string, opts *http.PushOptions) error {
	return p.c.w.(http.Pusher).Push(target, opts)
}

// MarkNotReplayable declares that the response being written to w is not
// what the client gets, or must never be sent again, so it is not replayed:
// the request is recorded as executed-not-replayable (if the store policy
// records its status at all), and a retry gets 409 response-not-replayable
// without running the handler again. w is the writer the middleware gave
// the handler, or one that wraps it and implements Unwrap; for any other
// writer (a request the middleware does not guard) it does nothing.
//
// Adapters call it when their framework answers outside the middleware,
// such as a gin middleware in front of the guard that renders c.Errors
// after the chain returns.
func MarkNotReplayable(w http.ResponseWriter) {
	if c := captureOf(w); c != nil {
		c.marked = true
	}
}

// captureOf returns the capture behind a writer made by newCapture, or nil.
func captureOf(w http.ResponseWriter) *capture {
	for {
		switch x := w.(type) {
		case interface{ self() *capture }:
			return x.self()
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}
