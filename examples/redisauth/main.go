// Command redisauth is a complete idempotent order service to copy from:
// run any number of instances over one Redis, and a client's retry of
// POST /orders runs the order once whichever instance it reaches.
//
// Callers authenticate with a bearer token. The service verifies it, and
// the idempotency scope hook takes the caller's principal from the verified
// token, so one caller's key never replays another caller's response, and
// a caller whose token was refreshed between two retries still gets its
// replay. Every API whose clients hold OAuth tokens needs such a hook: the
// token changes, the principal does not. The tokens here are HMAC-signed
// by the service itself (TOKEN_SECRET, shared by every instance) so that
// the program stands alone; put your OAuth verification (a JWT's
// signature and claims, or token introspection) in [verify].
//
// Two instances and a retry that reaches the other one:
//
//	export TOKEN_SECRET=$(head -c 32 /dev/urandom | base64)
//	go run ./redisauth -addr 127.0.0.1:8081 -redis 127.0.0.1:6379 &
//	go run ./redisauth -addr 127.0.0.1:8082 -redis 127.0.0.1:6379 &
//	TOKEN=$(go run ./redisauth -mint alice)
//	curl -i -X POST -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: order-1' -d '{"sku":"A1"}' 127.0.0.1:8081/orders
//	curl -i -X POST -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: order-1' -d '{"sku":"A1"}' 127.0.0.1:8082/orders
//
// The second answer is the first one, with Idempotent-Replayed: true. Each
// order takes its number from a Redis counter (INCR redisauth:orders), the
// effect that must happen once.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/redisstore"
)

// orderCounter is the Redis key the orders take their numbers from.
const orderCounter = "redisauth:orders"

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to listen on")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "the Redis server every instance shares")
	mintFor := flag.String("mint", "", "print a token for this principal and exit")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	secret := []byte(os.Getenv("TOKEN_SECRET"))
	if len(secret) < 16 {
		logger.Error("set TOKEN_SECRET to the same secret of at least 16 bytes on every instance")
		os.Exit(2)
	}
	if *mintFor != "" {
		token, err := mint(secret, *mintFor)
		if err != nil {
			logger.Error("mint", "err", err)
			os.Exit(2)
		}
		fmt.Println(token)
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *addr, *redisAddr, secret, logger); err != nil {
		logger.Error("redisauth stopped", "err", err)
		os.Exit(1)
	}
}

// serve serves the order service on addr until ctx ends, then shuts down
// gracefully.
func serve(ctx context.Context, addr, redisAddr string, secret []byte, logger *slog.Logger) error {
	// ContextTimeoutEnabled lets the guard bound every command by its
	// own timeout; redisstore.New refuses a client without it.
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	records, err := redisstore.New(client)
	if err != nil {
		return err
	}
	guard, err := middleware.New(records, middleware.WithLogger(logger))
	if err != nil {
		return err
	}
	// Refuse to start on a backend that cannot serve (unreachable, or an
	// ACL user without the commands the store needs): the error names the
	// fix, where serving would answer every request 503 or 500.
	if err := guard.Check(ctx); err != nil {
		return err
	}

	idem, err := nethttp.New(guard,
		nethttp.WithKeyRequired(true),
		nethttp.WithScope(principalOf), // the verified principal, not the token
	)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	// Authentication runs first: the scope hook reads what it verified.
	mux.Handle("POST /orders", authenticate(secret, idem(createOrder(client))))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("listening", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// createOrder is the business handler: it numbers the order from the
// shared counter, the effect the guard makes happen once per key.
func createOrder(client *redis.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "cannot read the request", http.StatusBadRequest)
			return
		}
		n, err := client.Incr(r.Context(), orderCounter).Result()
		if err != nil {
			// A 5xx is not stored: the client's retry runs the order again.
			http.Error(w, "orders are unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d,"principal":%q}`+"\n", n, principalOf(r))
	})
}

type principalKey struct{}

// authenticate refuses a request without a valid bearer token (401), and
// passes the others on with the token's principal in their context.
func authenticate(secret []byte, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lines := r.Header.Values("Authorization")
		token, ok := "", len(lines) == 1
		if ok {
			token, ok = strings.CutPrefix(lines[0], "Bearer ")
		}
		principal, err := verify(secret, token)
		if !ok || err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orders"`)
			http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)))
	})
}

// principalOf is the idempotency scope hook: the principal authenticate
// verified. Every guarded route sits behind authenticate, so it is never
// empty there.
func principalOf(r *http.Request) string {
	p, _ := r.Context().Value(principalKey{}).(string)
	return p
}

// A token reads principal.nonce.mac, the mac being the base64url
// HMAC-SHA-256 of "principal.nonce" under the secret; two tokens of one
// principal differ by their nonce, as an OAuth token and its refresh do.

// mint makes a token for principal, a name of letters, digits and '-'.
func mint(secret []byte, principal string) (string, error) {
	if principal == "" || strings.ContainsFunc(principal, func(c rune) bool {
		return !(c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z')
	}) {
		return "", fmt.Errorf("principal %q: use letters, digits and '-'", principal)
	}
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	body := principal + "." + base64.RawURLEncoding.EncodeToString(nonce)
	return body + "." + base64.RawURLEncoding.EncodeToString(sign(secret, body)), nil
}

// verify returns the principal of a token the secret signed. These tokens
// never expire; an OAuth verification also checks the expiry, the issuer
// and the audience.
func verify(secret []byte, token string) (string, error) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", errors.New("malformed token")
	}
	mac, err := base64.RawURLEncoding.DecodeString(token[i+1:])
	if err != nil || !hmac.Equal(mac, sign(secret, token[:i])) {
		return "", errors.New("bad signature")
	}
	principal, _, ok := strings.Cut(token[:i], ".")
	if !ok || principal == "" {
		return "", errors.New("malformed token")
	}
	return principal, nil
}

func sign(secret []byte, body string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(body))
	return h.Sum(nil)
}
