// Command nethttp serves the demo service on net/http with idemkit in front
// of it:
//
//	go run ./nethttp -addr 127.0.0.1:8080              # memory backend
//
//	POST /orders    guarded, Idempotency-Key required
//	POST /notes     guarded, Idempotency-Key optional
//	POST /checkout  guarded, Idempotency-Key required: three steps with
//	                recovery points (reserve, charge, email)
//	GET  /stats     {"executions": n, "checkouts": n, "steps": {"reserve": n, ...}}
//
// Requests may carry Authorization: Bearer alice-1 (or Bearer alice-2,
// Alice after a token refresh) or Bearer bob-1; other credentials are
// refused with 401, and a request without any is the anonymous caller.
// Idempotency keys are scoped by caller (see demo.Principal): Bob's
// request with Alice's key runs as his own, never answered with hers.
//
// Query parameters make the business handler misbehave on purpose: sleep,
// status, panic, bytes, stream (see package demo). It logs with slog and
// shuts down gracefully on SIGINT and SIGTERM.
//
// POST /checkout (body {"item": "book", "amount": "12.50"}) records each
// step's result before the next begins (middleware.StepOf). Started with
// -faults, POST /checkout?crash=after-reserve (or after-charge) ends the
// process the moment that step is recorded; the same request retried on
// another instance resumes after it, and that instance's GET /stats shows
// that only the remaining steps ran there:
//
//	go run ./nethttp -faults -store redis -addr 127.0.0.1:8080 &
//	go run ./nethttp -faults -store redis -addr 127.0.0.1:8081 &
//	curl -H 'Idempotency-Key: c-1' -d '{"item":"book","amount":"12.50"}' '127.0.0.1:8080/checkout?crash=after-charge'
//	curl -H 'Idempotency-Key: c-1' -d '{"item":"book","amount":"12.50"}' '127.0.0.1:8081/checkout?crash=after-charge'
//	curl 127.0.0.1:8081/stats   # reserve 0, charge 0, email 1
//
// (The retry waits out the crashed instance's lease, 10 seconds, answering
// 409 in progress until then.)
//
// With -metrics, GET /metrics serves the guard's metrics (see package
// idemkitotel) in the Prometheus text format, beside the demo's routes:
//
//	go run ./nethttp -metrics
//	curl http://127.0.0.1:8080/metrics
package main

import (
	"log/slog"
	"net/http"

	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
)

func main() { cli.Main(program()) }

// program is the demo on net/http.
func program() cli.Program {
	return cli.HTTP("nethttp", func(svc *demo.Service, guard *middleware.Guard, _ *slog.Logger) (http.Handler, error) {
		return demo.NetHTTP(svc, guard)
	})
}
