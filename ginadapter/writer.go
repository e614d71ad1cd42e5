package ginadapter

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// noWritten is the size of a response whose header is not sent yet.
const noWritten = -1

var (
	errHijackAfterWrite = errors.New("ginadapter: the response body is already written; the connection cannot be hijacked")
	errNoHijack         = errors.New("ginadapter: the response writer does not support hijacking")
)

// responseWriter is the gin.ResponseWriter the guarded chain writes to. It
// behaves as gin's own writer does (the status is kept until the first
// byte, a flush or WriteHeaderNow sends it) over the core's capturing
// writer, which passes everything on to gin's writer of the request. So
// the capture sees the status and headers at the moment gin would send
// them, and gin's writer keeps its status, size and written state right
// for the middleware before this one.
type responseWriter struct {
	w       http.ResponseWriter // the capture
	outer   gin.ResponseWriter  // gin's writer of the request
	status  int
	initial int // gin's status of the request when the chain began
	size    int
	pending bool // a status is chosen but not sent
}

var _ gin.ResponseWriter = (*responseWriter)(nil)

// newResponseWriter starts with gin's status of the request: 200, or the
// 404 or 405 gin sets before it runs the middleware of an unmatched route.
func newResponseWriter(capture http.ResponseWriter, outer gin.ResponseWriter) *responseWriter {
	status := outer.Status()
	return &responseWriter{w: capture, outer: outer, status: status, initial: status, size: noWritten, pending: status != http.StatusOK}
}

// Header returns the response's header map.
func (w *responseWriter) Header() http.Header { return w.w.Header() }

// WriteHeader keeps code until the header is sent; after that it is
// ignored, as in gin.
func (w *responseWriter) WriteHeader(code int) {
	if code <= 0 || w.Written() {
		return
	}
	w.status, w.pending = code, true
}

// WriteHeaderNow sends the header unless it is sent already.
func (w *responseWriter) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.pending = false
		w.w.WriteHeader(w.status)
	}
}

// Write sends the header if needed, then p.
func (w *responseWriter) Write(p []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.w.Write(p)
	w.size += n
	return n, err
}

// WriteString writes s.
func (w *responseWriter) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.w, s)
	w.size += n
	return n, err
}

// Status returns the response's status (gin's default, 200, until one is
// set).
func (w *responseWriter) Status() int { return w.status }

// Size returns the number of body bytes written, -1 before the header is
// sent.
func (w *responseWriter) Size() int { return w.size }

// Written reports whether the header is sent.
func (w *responseWriter) Written() bool { return w.size != noWritten }

// Flush sends the header if needed and flushes: the response is streamed,
// so it is recorded as executed-not-replayable.
func (w *responseWriter) Flush() {
	w.WriteHeaderNow()
	if f, ok := w.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands over the connection (allowed until body bytes are written,
// as in gin); the response is recorded as executed-not-replayable.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.size > 0 {
		return nil, nil, errHijackAfterWrite
	}
	h, ok := w.w.(http.Hijacker)
	if !ok {
		return nil, nil, errNoHijack
	}
	conn, rw, err := h.Hijack()
	if err == nil && w.size < 0 {
		w.size = 0
	}
	return conn, rw, err
}

// CloseNotify returns gin's close notification of the request, which
// gin.ResponseWriter requires and c.Stream uses.
func (w *responseWriter) CloseNotify() <-chan bool { return w.outer.CloseNotify() }

// Pusher returns the HTTP/2 pusher of the connection, or nil.
func (w *responseWriter) Pusher() http.Pusher { return w.outer.Pusher() }

// Unwrap returns the capturing writer, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.w }

// commit sends a status the chain chose but did not send (c.Status(204)
// without a body, or the 404 of an unmatched route), as gin's engine does
// after the chain, so that the record has it and the client gets exactly
// what a replay will send. For an unmatched route whose status the chain
// left alone, that is gin's own answer, "404 page not found" (or "405
// method not allowed") as text/plain. A chain that chose nothing and wrote
// nothing is left to the core: a 200 with an empty body, or, if the client
// is gone, nothing recorded.
func (w *responseWriter) commit() {
	if !w.pending || w.Written() {
		return
	}
	var body string
	if w.status == w.initial {
		switch w.status {
		case http.StatusNotFound:
			body = "404 page not found"
		case http.StatusMethodNotAllowed:
			body = "405 method not allowed"
		}
	}
	if body != "" {
		w.Header()["Content-Type"] = []string{gin.MIMEPlain}
		_, _ = w.WriteString(body)
		return
	}
	w.WriteHeaderNow()
	w.outer.WriteHeaderNow()
}

// stage passes a status the chain chose but did not send to the capture,
// and so to gin's writer, without sending it: a middleware in front may
// still change it and write the body.
func (w *responseWriter) stage() {
	if w.pending && !w.Written() {
		w.WriteHeaderNow()
	}
}
