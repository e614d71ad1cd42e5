package nethttp

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func keepAll(string) bool { return true }

// plainWriter is a ResponseWriter with no optional interfaces.
type plainWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (p *plainWriter) Header() http.Header { return p.h }
func (p *plainWriter) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *plainWriter) Write(b []byte) (int, error) { return p.body.Write(b) }

// hijackWriter adds only http.Hijacker.
type hijackWriter struct{ plainWriter }

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	a, _ := net.Pipe()
	return a, nil, nil
}

func TestCaptureAdvertisesExactlyTheWrappedInterfaces(t *testing.T) {
	for _, c := range []struct {
		name          string
		w             http.ResponseWriter
		flush, hijack bool
	}{
		{"plain", &plainWriter{h: http.Header{}}, false, false},
		{"hijacker only", &hijackWriter{plainWriter{h: http.Header{}}}, false, true},
		{"recorder (flusher)", httptest.NewRecorder(), true, false},
	} {
		cw, capture := newCapture(c.w, keepAll, 0)
		_, f := cw.(http.Flusher)
		_, h := cw.(http.Hijacker)
		_, p := cw.(http.Pusher)
		if f != c.flush || h != c.hijack || p {
			t.Fatalf("%s: Flusher %v Hijacker %v Pusher %v; want %v %v false", c.name, f, h, p, c.flush, c.hijack)
		}
		if captureOf(cw) != capture {
			t.Fatalf("%s: captureOf does not find the capture", c.name)
		}
		if cw.(interface{ Unwrap() http.ResponseWriter }).Unwrap() != c.w {
			t.Fatalf("%s: Unwrap does not return the wrapped writer", c.name)
		}
	}
}

func TestCaptureEdgeCases(t *testing.T) {
	rec := httptest.NewRecorder()
	cw, c := newCapture(rec, func(n string) bool { return n == "Content-Type" }, 10)
	cw.Header().Set("Content-Type", "text/plain")
	cw.Header().Set("X-Other", "1")
	cw.WriteHeader(http.StatusEarlyHints) // 1xx: passed on, not recorded
	cw.WriteHeader(http.StatusAccepted)
	cw.WriteHeader(http.StatusTeapot) // repeated: ignored
	_, _ = cw.Write([]byte("hello"))
	r, err := decodeResponse(c.record())
	if err != nil {
		t.Fatal(err)
	}
	status, header, body := r.Status, r.Header, r.Body
	if status != http.StatusAccepted {
		t.Fatalf("status %d; want 202", status)
	}
	if header.Get("Content-Type") != "text/plain" || header.Get("X-Other") != "" {
		t.Fatalf("recorded headers %v; want only the kept ones", header)
	}
	if string(body) != "hello" || !c.replayable() {
		t.Fatalf("body %q, replayable %v", body, c.replayable())
	}
	// Crossing the capture limit: still delivered, no longer replayable.
	_, _ = cw.Write([]byte(" world, and more"))
	if c.replayable() || rec.Body.String() != "hello world, and more" {
		t.Fatalf("over the limit: replayable %v, delivered %q", c.replayable(), rec.Body.String())
	}

	// A missing WriteHeader means 200; a flush marks the response streamed.
	rec2 := httptest.NewRecorder()
	cw2, c2 := newCapture(rec2, keepAll, 0)
	_, _ = cw2.Write([]byte("x"))
	if c2.status != http.StatusOK || !c2.replayable() {
		t.Fatalf("implicit status %d, replayable %v", c2.status, c2.replayable())
	}
	if err := http.NewResponseController(cw2).Flush(); err != nil {
		t.Fatal(err)
	}
	if c2.replayable() || !rec2.Flushed {
		t.Fatal("a flushed response is still replayable, or the flush did not reach the writer")
	}

	// Hijacking marks the response not replayable.
	hw := &hijackWriter{plainWriter{h: http.Header{}}}
	cw3, c3 := newCapture(hw, keepAll, 0)
	if _, _, err := http.NewResponseController(cw3).Hijack(); err != nil {
		t.Fatal(err)
	}
	if !c3.hijacked || c3.replayable() {
		t.Fatal("a hijacked response looks replayable")
	}
	// A flush through the controller on a writer that cannot flush reports
	// it, instead of pretending.
	cw4, _ := newCapture(&plainWriter{h: http.Header{}}, keepAll, 0)
	if err := http.NewResponseController(cw4).Flush(); err == nil {
		t.Fatal("Flush succeeded on a writer that cannot flush")
	}
}

// FuzzCapture drives a capture with a random sequence of writes, status
// codes and flushes, and checks its invariants against a model.
func FuzzCapture(f *testing.F) {
	f.Add([]byte{1, 200, 2, 5, 3, 2, 9}, 16)
	f.Add([]byte{2, 40, 1, 103, 1, 201}, 8)
	f.Fuzz(func(t *testing.T, ops []byte, limit int) {
		limit %= 4096
		rec := httptest.NewRecorder()
		cw, c := newCapture(rec, keepAll, limit)
		var delivered []byte
		status, flushed := 0, false
		for i := 0; i+1 < len(ops); i += 2 {
			switch ops[i] % 3 {
			case 0: // write n bytes
				p := bytes.Repeat([]byte{'a' + ops[i+1]%26}, int(ops[i+1]))
				_, _ = cw.Write(p)
				delivered = append(delivered, p...)
				if status == 0 {
					status = 200
				}
			case 1: // WriteHeader with a valid code
				code := 100 + int(ops[i+1])%500
				cw.WriteHeader(code)
				if status == 0 && (code >= 200 || code == 101) {
					status = code
				}
			case 2:
				cw.(http.Flusher).Flush()
				flushed = true
				if status == 0 {
					status = 200
				}
			}
		}
		if c.status != status {
			t.Fatalf("status %d; model %d", c.status, status)
		}
		if !bytes.Equal(rec.Body.Bytes(), delivered) {
			t.Fatal("the capture did not pass every byte through")
		}
		over := limit > 0 && len(delivered) > limit
		wantReplayable := !flushed && !over && status != 101
		if c.replayable() != wantReplayable {
			t.Fatalf("replayable %v; model %v (flushed %v, over %v)", c.replayable(), wantReplayable, flushed, over)
		}
		if wantReplayable && !bytes.Equal(c.body(), delivered) {
			t.Fatal("the recorded body differs from what was delivered")
		}
	})
}
