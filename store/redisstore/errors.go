package redisstore

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

// mapError turns an error from go-redis into an [*idemkit.Error] for op
// that unwraps to both its code's sentinel and err; nil for nil. It goes
// by type, and for a server's error reply by its error code (the reply's
// first word), never by message text (docs/backends.md lists the codes).
// The detail says what is wrong; the cause is go-redis's error, whose
// message never holds a key or an argument.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *idemkit.Error
	if errors.As(err, &e) {
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
		return idemkit.CodeNetworkTimeout, "Redis did not answer before the context's deadline"
	case errors.Is(err, redis.ErrClosed):
		return idemkit.CodeServiceUnavailable, "the Redis client is closed"
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return idemkit.CodeServiceUnavailable, "no connection to Redis was free in the client's pool in time"
	case redis.IsMaxClientsError(err):
		return idemkit.CodeRateLimited, "the Redis server refused the connection: it has reached maxclients"
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return serverError(rerr.Error())
	}
	var nerr net.Error
	switch {
	case errors.As(err, &nerr) && nerr.Timeout():
		return idemkit.CodeNetworkTimeout, "Redis did not answer in time"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return idemkit.CodeServiceUnavailable, "the connection to Redis failed"
	case errors.As(err, &nerr):
		return idemkit.CodeServiceUnavailable, "Redis cannot be reached"
	}
	return idemkit.CodeInternal, "unexpected error from the Redis client"
}

// serverError maps an error reply by its error code, its first word.
func serverError(msg string) (idemkit.Code, string) {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "OOM":
		return idemkit.CodeRateLimited, "the Redis server is out of memory (OOM: used memory is over maxmemory): it refuses new records until keys expire or are evicted"
	case "LOADING":
		return idemkit.CodeServiceUnavailable, "the Redis server is loading its data set (LOADING)"
	case "READONLY":
		return idemkit.CodeServiceUnavailable, "the Redis node is a read-only replica (READONLY): a failover may be under way"
	case "MASTERDOWN":
		return idemkit.CodeServiceUnavailable, "the Redis replica lost its master (MASTERDOWN)"
	case "CLUSTERDOWN":
		return idemkit.CodeServiceUnavailable, "the Redis Cluster is down (CLUSTERDOWN)"
	case "TRYAGAIN", "MOVED", "ASK":
		return idemkit.CodeServiceUnavailable, "the Redis Cluster is moving the key's slot (" + code + ")"
	case "BUSY":
		return idemkit.CodeServiceUnavailable, "the Redis server is busy running a script (BUSY)"
	case "NOREPLICAS":
		return idemkit.CodeServiceUnavailable, "not enough Redis replicas (NOREPLICAS)"
	case "MISCONF":
		return idemkit.CodeServiceUnavailable, "the Redis server cannot persist its data and refuses writes (MISCONF)"
	case "NOAUTH", "WRONGPASS":
		return idemkit.CodeAuthFailed, "the Redis server refused the credentials (" + code + ")"
	case "NOPERM":
		return idemkit.CodeAuthFailed, "the Redis user may not run the store's commands (NOPERM): it needs MULTI, EXEC, GET, SET, PEXPIRETIME, PTTL, EVAL, EVALSHA and what the scripts call (docs/backends.md lists them), on the keys of the store's prefix"
	case "FENCEMAX": // the store's own, from its claim script
		return idemkit.CodeInternal, "the key's next fence would exceed idemkit.FenceMax; nothing was written"
	case "WRONGTYPE":
		return idemkit.CodeInternal, "a Redis key of the store holds a value of another type (WRONGTYPE): does another program write under the store's key prefix?"
	}
	if !errorCode(code) {
		code = "ERR"
	}
	return idemkit.CodeInternal, "the Redis server answered with an error (" + code + ")"
}

// errorCode reports whether s looks like a server error code (upper-case
// letters), so that a detail never quotes free text.
func errorCode(s string) bool {
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

// replyError reports a reply of an unexpected shape.
func replyError(op string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "unexpected reply from Redis", nil)
}
