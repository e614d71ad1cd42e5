package redislock

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/idemkit/idemkit"
	"github.com/redis/go-redis/v9"
)

// MapError turns an error from go-redis into a [*idemkit.Error] for op that
// unwraps to both its code's sentinel and err. It returns nil for nil and
// for [redis.Nil] (absence is a result, not an error). The mapping, by type
// and by the server's error code (the first word of its reply), never by
// message text:
//
//	context.Canceled                            Aborted
//	context.DeadlineExceeded, net.Error timeout NetworkTimeout
//	redis.ErrClosed, ErrPoolTimeout, ErrPoolExhausted,
//	  io.EOF, connection refused/reset, broken pipe,
//	  any other net.Error (dial, DNS)           ServiceUnavailable
//	LOADING READONLY MASTERDOWN CLUSTERDOWN TRYAGAIN
//	  MOVED ASK BUSY NOREPLICAS MISCONF          ServiceUnavailable
//	NOAUTH WRONGPASS NOPERM                     AuthFailed
//	OOM                                         RateLimited
//	anything else (CROSSSLOT, WRONGTYPE, NOSCRIPT,
//	  ERR, a script error, an unknown error)     Internal
//
// OOM is RateLimited: the server refuses writes while it is over its
// maxmemory quota, and recovers as keys expire or are evicted, so a later
// attempt may succeed (the code is transient) but retrying at once will
// not help. MOVED and ASK reach the caller only when the client gave up
// following redirects (a slot-migration storm); BUSY when a script blocks
// the server.
//
// The error's message is go-redis's, which never holds a key or an argument
// of a command.
func MapError(op string, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	var le *idemkit.Error
	if errors.As(err, &le) {
		return err
	}
	code, detail := classify(err)
	return idemkit.NewError(code, op, detail, err)
}

func classify(err error) (idemkit.Code, string) {
	switch {
	case errors.Is(err, context.Canceled):
		return idemkit.CodeAborted, "context canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return idemkit.CodeNetworkTimeout, "context deadline exceeded"
	case errors.Is(err, redis.ErrClosed):
		return idemkit.CodeServiceUnavailable, "client closed"
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return idemkit.CodeServiceUnavailable, "no connection available in the pool"
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return serverCode(rerr.Error())
	}
	var nerr net.Error
	switch {
	case errors.As(err, &nerr) && nerr.Timeout():
		return idemkit.CodeNetworkTimeout, "network timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return idemkit.CodeServiceUnavailable, "connection failed"
	case errors.As(err, &nerr):
		return idemkit.CodeServiceUnavailable, "network error"
	}
	return idemkit.CodeInternal, "unexpected client error"
}

// serverCode maps a server error reply by its error code, the first word.
func serverCode(msg string) (idemkit.Code, string) {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOREPLICAS", "MISCONF":
		return idemkit.CodeServiceUnavailable, "server unavailable (" + code + ")"
	case "NOAUTH", "WRONGPASS", "NOPERM":
		return idemkit.CodeAuthFailed, "server refused the credentials (" + code + ")"
	case "OOM":
		return idemkit.CodeRateLimited, "server over its memory limit (OOM)"
	}
	if !isErrorCode(code) {
		code = "ERR"
	}
	return idemkit.CodeInternal, "server error (" + code + ")"
}

// isErrorCode reports whether s looks like a server error code (upper-case
// letters), so that the detail never quotes free text.
func isErrorCode(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// replyError reports a script reply of an unexpected shape.
func replyError(op, what string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "unexpected reply from Redis: "+what, nil)
}
