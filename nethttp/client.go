package nethttp

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
)

// Transport is the client side of idempotency: an http.RoundTripper that
// gives every POST and PATCH without an Idempotency-Key a fresh one, and
// retries it with that same key after a connection error, on 409 with
// Retry-After, 429 and 503, and, with AttemptTimeout, after an attempt
// without an answer in time; with capped exponential back-off and jitter,
// honouring the request's context and Retry-After. A request whose body
// cannot be sent again (no GetBody) is sent once.
//
// When the caller's deadline ends the call, or the attempts fail, the
// outcome on the server is unknown: retry with the same key, which the
// error carries ([KeyError]) or [Transport.SetKey] gave beforehand.
// docs/http.md explains. The zero value is usable.
type Transport struct {
	// Base sends each attempt. Default: http.DefaultTransport.
	Base http.RoundTripper
	// Header is the key header. Default: "Idempotency-Key".
	Header string
	// Methods get a key when they lack one, and are retried. Default: POST
	// and PATCH.
	Methods []string
	// MaxAttempts bounds the attempts per request, the first included.
	// Default: 4.
	MaxAttempts int
	// AttemptTimeout bounds how long an attempt waits for its answer's
	// headers; past it the attempt is sent again with the same key and
	// body, and on a server that honours the key the new attempt waits as
	// a duplicate and gets the recorded answer. The last attempt is never
	// cut short, and the caller's deadline bounds every attempt. Default:
	// 0, no limit: a long handler is never cut short, and a server that
	// ignores the key never gets a request twice for being slow.
	AttemptTimeout time.Duration
	// Backoff is the back-off between attempts; Max also caps a server's
	// Retry-After (a longer one ends the retries). A zero Base means
	// 100 ms, a zero Max 5 s. Default: 100 ms doubling up to 5 s.
	Backoff idemkit.Backoff
	// NewKey makes a key for a request without one. Default: a random UUID
	// (version 4), unquoted, as most servers and Stripe's SDKs send it.
	NewKey func() string
}

var _ http.RoundTripper = (*Transport)(nil)

// KeyError is the error of a request sent with a key whose attempts
// brought no answer: it may or may not have run, so retry it with Key,
// never a new key. It wraps the last error. http.Client's own error after
// Client.Timeout does not carry it: use [Transport.SetKey] for that case.
type KeyError struct {
	Key string // the key header's value, as sent
	Err error  // the last attempt's error, or the context's
}

// Error names the key and the last error.
func (e *KeyError) Error() string {
	return "nethttp: request with idempotency key " + strconv.Quote(e.Key) + ": " + e.Err.Error()
}

// Unwrap returns the last error.
func (e *KeyError) Unwrap() error { return e.Err }

// SetKey gives req a fresh key unless it has one, and returns req's key,
// so the caller holds the key whatever becomes of the call.
func (t *Transport) SetKey(req *http.Request) string {
	header := t.header()
	if key := req.Header.Get(header); key != "" {
		return key
	}
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	key := t.newKey()
	req.Header.Set(header, key)
	return key
}

// RoundTrip sends req, with retries as described on [Transport].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.guarded(req.Method) {
		return t.base().RoundTrip(req)
	}
	header := t.header()
	key := req.Header.Get(header)
	if key == "" {
		key = t.newKey()
		req = req.Clone(req.Context()) // a RoundTripper must not modify the caller's request
		req.Header.Set(header, key)
	}
	resp, err := t.send(req)
	if err != nil {
		return nil, &KeyError{Key: key, Err: err}
	}
	return resp, nil
}

// send makes the attempts of req, which carries its key.
func (t *Transport) send(req *http.Request) (*http.Response, error) {
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	maxAttempts := t.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = 4
	}
	if !replayable {
		maxAttempts = 1
	}
	ctx := req.Context()
	for attempt := 1; ; attempt++ {
		try := req
		if attempt > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			try = req.Clone(ctx)
			try.Body = body
		}
		var (
			resp  *http.Response
			err   error
			wait  time.Duration
			retry bool
		)
		if t.AttemptTimeout > 0 && attempt < maxAttempts {
			var cut bool
			resp, cut, err = t.timedAttempt(try)
			if cut {
				wait, retry = t.backoff().Delay(attempt), true
			} else {
				wait, retry = t.retryable(resp, err, attempt)
			}
		} else {
			resp, err = t.base().RoundTrip(try)
			wait, retry = t.retryable(resp, err, attempt)
		}
		if !retry || attempt >= maxAttempts {
			return resp, err
		}
		if resp != nil {
			// Drain a little so the connection can be reused, then drop it.
			_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
			resp.Body.Close()
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// attemptTimeoutError ends an attempt that got no answer within
// AttemptTimeout. It is a timeout, and counts as a deadline exceeded, as
// net/http's own timeouts do.
type attemptTimeoutError struct{ d time.Duration }

func (e *attemptTimeoutError) Error() string {
	return "nethttp: no answer within the attempt timeout (" + e.d.String() + ")"
}
func (e *attemptTimeoutError) Timeout() bool        { return true }
func (e *attemptTimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// timedAttempt sends one attempt, abandoned if its answer's headers take
// longer than AttemptTimeout; cut reports that it was. The time limit ends
// when the headers arrive: the body of the answer is read under the
// caller's deadline only, and closing it (or reading it to its end)
// releases the attempt's context.
func (t *Transport) timedAttempt(req *http.Request) (resp *http.Response, cut bool, err error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timeout := &attemptTimeoutError{t.AttemptTimeout}
	// The timer and the answer race to settle the attempt: once answered,
	// the timer no longer cancels the context the body is read under.
	const running, timedOut, answered = 0, 1, 2
	var state atomic.Int32
	timer := time.AfterFunc(t.AttemptTimeout, func() {
		if state.CompareAndSwap(running, timedOut) {
			cancel(timeout)
		}
	})
	resp, err = t.base().RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if !state.CompareAndSwap(running, answered) {
		// Cut, or answered just as the time ran out, too late to read the
		// body under a cancelled context: the next attempt gets the answer.
		if resp != nil {
			resp.Body.Close()
		}
		return nil, true, timeout
	}
	if err != nil {
		cancel(nil)
		return nil, false, err
	}
	release := func() { cancel(nil) }
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &releaseRWBody{releaseBody{rw, release}, rw}
	} else {
		resp.Body = &releaseBody{resp.Body, release}
	}
	return resp, false, nil
}

// releaseBody calls release once the body is read to its end or closed.
type releaseBody struct {
	io.ReadCloser
	release func()
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// releaseRWBody keeps the writable body of a 101 Switching Protocols
// answer writable.
type releaseRWBody struct {
	releaseBody
	w io.Writer
}

func (b *releaseRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// retryable decides whether an attempt's outcome may be retried with the
// same key, and after how long.
func (t *Transport) retryable(resp *http.Response, err error, attempt int) (time.Duration, bool) {
	if err != nil {
		var ctxErr bool
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			ctxErr = true
		}
		return t.backoff().Delay(attempt), !ctxErr
	}
	switch resp.StatusCode {
	case http.StatusConflict:
		ra, ok := retryAfter(resp)
		if !ok {
			return 0, false // a 409 without Retry-After is not "in progress"
		}
		return t.capped(ra, attempt)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		if ra, ok := retryAfter(resp); ok {
			return t.capped(ra, attempt)
		}
		return t.backoff().Delay(attempt), true
	}
	return 0, false
}

// capped waits the server's Retry-After (at least the back-off), unless it
// exceeds the back-off's maximum: then it does not retry.
func (t *Transport) capped(ra time.Duration, attempt int) (time.Duration, bool) {
	if ra > t.backoff().Max {
		return 0, false
	}
	return max(ra, t.backoff().Delay(attempt)), true
}

// backoff returns the Transport's back-off with its defaults filled in.
func (t *Transport) backoff() idemkit.Backoff {
	b := t.Backoff
	if b.Base <= 0 {
		b.Base = 100 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	b.Max = max(b.Max, b.Base)
	return b
}

func (t *Transport) guarded(method string) bool {
	if t.Methods == nil {
		return method == http.MethodPost || method == http.MethodPatch
	}
	for _, m := range t.Methods {
		if m == method {
			return true
		}
	}
	return false
}

func (t *Transport) header() string {
	if t.Header == "" {
		return defaultHeader
	}
	return t.Header
}

func (t *Transport) newKey() string {
	if t.NewKey == nil {
		return newUUID()
	}
	return t.NewKey()
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// retryAfter reads a Retry-After in seconds or as an HTTP date.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0), true
	}
	return 0, false
}

// newUUID returns a random (version 4) UUID in its canonical text form.
func newUUID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
