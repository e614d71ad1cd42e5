package redisstore_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// loggingGuard returns a guard on s that logs to log, with a failure log
// interval longer than any test.
func loggingGuard(t *testing.T, s *redisstore.Store, log *guardtest.Log) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour),
		middleware.WithOpTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// noPermStore returns a store on srv for a user who may not run the
// store's scripts.
func noPermStore(t *testing.T, srv *testenv.RedisServer) *redisstore.Store {
	t.Helper()
	admin := nodeClient(t, srv.Addr)
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "+get", "+hello", "+auth", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.LoadScript(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	c := nodeClient(t, srv.Addr, func(o *redis.Options) { o.Username, o.Password = "reader", "reader-pw" })
	s, err := redisstore.New(c, redisstore.WithKeyPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKilledServerUnderRunningService: a service whose Redis is killed
// answers every request 503 with Retry-After, and its guard logs why once
// (per cause), not once per request.
func TestKilledServerUnderRunningService(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := nodeClient(t, srv.Addr, func(o *redis.Options) { o.MaxRetries, o.DialerRetries, o.DialTimeout = -1, 1, time.Second })
	var log guardtest.Log
	url := guardtest.Serve(t, loggingGuard(t, newStore(t, c), &log))
	if a := guardtest.Post(t, url, "before"); a.Status != http.StatusCreated {
		t.Fatalf("before the kill: %+v", a)
	}
	srv.Stop(t)
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 20, Status: http.StatusServiceUnavailable, Kind: "idempotency-unavailable",
		Code: "ServiceUnavailable", Words: []string{"Redis"},
	})
}

// TestNoPermUnderRunningService: a service whose Redis user may not run
// the store's scripts (NOPERM) answers every request 500 of its own
// problem type, without Retry-After (retrying cannot help), and its guard
// logs the fix once.
func TestNoPermUnderRunningService(t *testing.T) {
	srv := testenv.NewRedis(t)
	var log guardtest.Log
	url := guardtest.Serve(t, loggingGuard(t, noPermStore(t, srv), &log))
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 20, Status: http.StatusInternalServerError, Kind: "idempotency-misconfigured",
		Code: "AuthFailed", Words: []string{"NOPERM", "EVALSHA"},
	})
}

// TestGuardCheck: the startup check passes on a good setup and names the
// fix on a user without the store's permissions; on a killed server it
// says Redis cannot be reached.
func TestGuardCheck(t *testing.T) {
	srv := testenv.NewRedis(t)
	ctx := t.Context()
	good := newGuard(t, nodeClient(t, srv.Addr))
	if err := good.Check(ctx); err != nil {
		t.Fatalf("Check on a good setup: %v", err)
	}

	noPerm, err := middleware.New(noPermStore(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	err = noPerm.Check(ctx)
	if idemkit.CodeOf(err) != idemkit.CodeAuthFailed || !errors.Is(err, middleware.ErrUnavailable) ||
		!strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "it needs MULTI, EXEC, GET, SET, PEXPIRETIME, PTTL, EVAL, EVALSHA") {
		t.Fatalf("Check with a user without permissions: %v; want AuthFailed naming the commands the user needs", err)
	}
	t.Logf("no permissions: %v", err)

	down := nodeClient(t, srv.Addr, func(o *redis.Options) { o.MaxRetries = -1 })
	g := newGuard(t, down)
	srv.Stop(t)
	err = g.Check(ctx)
	if !idemkit.CodeOf(err).Transient() {
		t.Fatalf("Check on a killed server: %v; want a transient code", err)
	}
	t.Logf("killed: %v", err)
}
