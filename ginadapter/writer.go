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

// responseWriter is the gin.ResponseWriter the guarded chain writes to: it
// behaves as gin's own (the status kept until the first byte, a flush or
// WriteHeaderNow) over the capturing writer, which passes everything on to
// gin's writer, so the capture sees the status when gin would send it and
// gin's writer stays right for the middleware before this one.
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

// commit sends a status the chain chose but did not send (c.Status(204),
// an unmatched route's 404 with gin's own text body), as gin's engine does
// after the chain, so the record holds what the client gets. A chain that
// chose and wrote nothing is left to nethttp (200, empty).
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
