package nethttp

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idemkit"
)

// Transport is the client side of idempotency: an http.RoundTripper that
// gives every POST and PATCH without an Idempotency-Key a fresh one, and
// retries it with that same key when retrying is safe — after a connection
// error, and on 409 with Retry-After (the first request with the key is
// still running), 429 and 503 — with capped exponential back-off and
// jitter, honouring the request's context and any Retry-After the server
// sends. Because every attempt carries the same key, a retry can never run
// the request twice on an idempotent server.
//
// A request whose body cannot be replayed (no GetBody) is sent once and not
// retried. Requests of other methods, and requests that already carry a
// key, are retried the same way only if their method is listed in Methods.
//
// The zero value is usable: it sends through http.DefaultTransport with the
// defaults below.
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
	// Backoff is the back-off between attempts (see [idemkit.Backoff]:
	// the n-th delay is drawn from [d/2, d] for d = Base·2^(n−1), capped
	// by Max). Backoff.Max also caps a server's Retry-After: a longer one
	// ends the retries and returns that answer. A zero Base means 100 ms,
	// a zero Max 5 s, and a Max below Base counts as Base. Default: 100 ms
	// doubling up to 5 s.
	Backoff idemkit.Backoff
	// NewKey makes a key for a request without one. Default: a random UUID
	// (version 4), unquoted, as most servers and Stripe's SDKs send it.
	NewKey func() string
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip sends req, with retries as described on [Transport].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.guarded(req.Method) {
		return t.base().RoundTrip(req)
	}
	header := t.Header
	if header == "" {
		header = defaultHeader
	}
	if req.Header.Get(header) == "" {
		newKey := t.NewKey
		if newKey == nil {
			newKey = newUUID
		}
		req = req.Clone(req.Context()) // a RoundTripper must not modify the caller's request
		req.Header.Set(header, newKey())
	}
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
		resp, err := t.base().RoundTrip(try)
		wait, retry := t.retryable(resp, err, attempt)
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
