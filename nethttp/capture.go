package nethttp

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
)

// capture is the ResponseWriter a guarded handler writes to. It passes
// everything through to the real writer at once (streaming works) and
// builds the record of the response as it goes: when the status is
// written, the encoded status and replayable headers (see encodeResponse),
// and then the body after them.
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
	rec       []byte // the record: status and replayable headers as they were when the status was written, then the body
	head      int    // where the body starts in rec
	wrote     bool
	flushed   bool
	hijacked  bool
	overLimit bool
	marked    bool // MarkNotReplayable was called

	// Holding back the response of work whose transaction commits with
	// its outcome: began tells whether the work began one, holding is set
	// when the status is written after it did (the body is then held in
	// rec, up to the limit), and heldOver when the body outgrew the limit:
	// the rest is refused, and the transaction is rolled back.
	began    func() bool
	holding  bool
	heldOver bool

	// reqBody is the body of the request the handler is given (see
	// Core.run): kept here, it takes no allocation of its own.
	reqBody bufferedBody
}

// newCapture wraps w. keep selects the headers worth recording; limit
// bounds the recorded body (beyond it the response is still delivered but
// not replayable; limit <= 0: no limit). The returned writer is the capture
// itself or a wrapper of it that adds exactly the optional interfaces
// (Flusher, Hijacker, Pusher) w has, allocated with it; captureOf gets the
// capture back.
func newCapture(w http.ResponseWriter, keep func(name string) bool, limit int) (http.ResponseWriter, *capture) {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	switch {
	case f && h && p:
		x := &struct {
			capture
			flusher
			hijacker
			pusher
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.flusher.c, x.hijacker.c, x.pusher.c = &x.capture, &x.capture, &x.capture
		return x, &x.capture
	case f && h:
		x := &struct {
			capture
			flusher
			hijacker
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.flusher.c, x.hijacker.c = &x.capture, &x.capture
		return x, &x.capture
	case f && p:
		x := &struct {
			capture
			flusher
			pusher
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.flusher.c, x.pusher.c = &x.capture, &x.capture
		return x, &x.capture
	case h && p:
		x := &struct {
			capture
			hijacker
			pusher
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.hijacker.c, x.pusher.c = &x.capture, &x.capture
		return x, &x.capture
	case f:
		x := &struct {
			capture
			flusher
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.flusher.c = &x.capture
		return x, &x.capture
	case h:
		x := &struct {
			capture
			hijacker
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.hijacker.c = &x.capture
		return x, &x.capture
	case p:
		x := &struct {
			capture
			pusher
		}{}
		x.capture = capture{w: w, keep: keep, limit: limit}
		x.pusher.c = &x.capture
		return x, &x.capture
	}
	c := &capture{w: w, keep: keep, limit: limit}
	return c, c
}

func (c *capture) Header() http.Header { return c.w.Header() }

// The room for the body the record is first given: bodyRoom, or the
// Content-Length the handler declared up to maxBodyRoom. Small answers
// then cost one allocation; larger ones grow it.
const (
	bodyRoom    = 128
	maxBodyRoom = 64 << 10
)

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
	c.holding = c.began != nil && c.began()
	h := c.w.Header()
	room := bodyRoom
	if cl := h.Get("Content-Length"); cl != "" {
		if n, err := strconv.Atoi(cl); err == nil && n >= 0 && (c.limit <= 0 || n <= c.limit) {
			room = min(n, maxBodyRoom)
		}
	}
	c.rec = appendHead(nil, code, h, c.keep, room)
	c.head = len(c.rec)
	if c.holding {
		return
	}
	c.w.WriteHeader(code)
}

// errHeldTooLarge is what Write answers a handler whose response, held
// until its transaction commits, outgrew the limit.
var errHeldTooLarge = errors.New("nethttp: the response exceeds the response limit (WithMaxResponseBytes), the most held until the handler's transaction commits; the transaction will be rolled back")

// Write passes p on and keeps a copy, up to the capture limit. A held
// response (see send) is only kept, up to the limit: past it, Write
// refuses p and every later write (errHeldTooLarge), and the work is
// rolled back, so memory stays bounded by the limit.
func (c *capture) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	if c.holding {
		if c.heldOver || c.limit > 0 && len(c.rec)-c.head+len(p) > c.limit {
			c.heldOver, c.rec = true, nil
			return 0, errHeldTooLarge
		}
		c.rec = append(c.rec, p...)
		return len(p), nil
	}
	if !c.overLimit {
		if c.limit > 0 && len(c.rec)-c.head+len(p) > c.limit {
			c.overLimit, c.rec = true, nil
		} else {
			c.rec = append(c.rec, p...)
		}
	}
	return c.w.Write(p)
}

// send writes a held response to the real writer, once its work's
// transaction committed: the status, the body, and a flush if the handler
// flushed. It does nothing for a response that was not held.
func (c *capture) send() {
	if !c.holding {
		return
	}
	c.holding = false
	c.w.WriteHeader(c.status)
	if body := c.body(); len(body) > 0 {
		_, _ = c.w.Write(body)
	}
	if c.flushed {
		if f, ok := c.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// drop discards a held response whose work's transaction did not commit,
// with the headers the handler set, so that the refusal written instead
// carries none of them. It reports whether the response was held (false:
// it went out as it was written, and nothing can replace it).
func (c *capture) drop() bool {
	if !c.wrote {
		return true
	}
	if !c.holding {
		return false
	}
	c.holding, c.rec, c.wrote = false, nil, false
	clear(c.w.Header())
	return true
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

// record returns the encoded response (see encodeResponse): what a replay
// writes. The response must have been written.
func (c *capture) record() []byte { return c.rec }

func (c *capture) body() []byte {
	if c.rec == nil {
		return nil
	}
	return c.rec[c.head:]
}

type flusher struct{ c *capture }

// Flush marks the response streamed and flushes the real writer.
func (f flusher) Flush() {
	if !f.c.wrote {
		f.c.WriteHeader(http.StatusOK)
	}
	f.c.flushed = true
	if f.c.holding {
		return // flushed when it is sent
	}
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

// MarkNotReplayable declares that the response written to w (the writer
// the middleware gave the handler, or one that unwraps to it) is not what
// the client gets, or must never be sent again: it is recorded
// executed-not-replayable, and a retry gets 409 response-not-replayable.
// When the handler began a transaction that commits with the outcome, that
// transaction is rolled back instead and nothing is recorded. On any other
// writer it does nothing.
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
