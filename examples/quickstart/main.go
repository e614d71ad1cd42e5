// Command quickstart is idemkit's first demo (`make demo`). It serves a
// small order service through a real net/http listener on a free loopback
// port, guarded by idemkit on the in-memory backend, and shows with real
// HTTP clients:
//
//  1. a retry storm (20 concurrent duplicates) that runs the order once;
//  2. a duplicate that will not wait (Prefer: wait=0) while the first
//     still runs: 409 idempotency-key-in-progress with Retry-After;
//  3. the raw answers a client gets: a replay (Idempotent-Replayed: true)
//     and a refusal (422 problem+json: the key reused with another body);
//  4. a lost response: the first answer is dropped (the connection is
//     closed), and the client's [nethttp.Transport] retries with the same
//     key and gets the replay;
//
// then the next steps. It exits non-zero unless its three orders ran three
// times in all.
//
// It is a module of its own that needs nothing but the root module (and the
// standard library), so that a first `make demo` compiles about 200
// packages (most of them the standard library's net/http and crypto/tls)
// and nothing else:
//
//	cd examples/quickstart && go run .
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

func main() {
	sum, err := run(context.Background(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
	if sum.executions != 3 {
		fmt.Fprintf(os.Stderr, "quickstart: 3 orders ran %d times; want 3\n", sum.executions)
		os.Exit(1)
	}
}

// stormSize is how many concurrent duplicates the retry storm sends.
const stormSize = 20

// summary is what the run's clients got, for main and the test to check.
type summary struct {
	stormExecuted, stormReplayed int    // answers of the storm: 201 executed, 201 replayed
	stormOther                   int    // any other answer of the storm
	conflict                     int    // the status of the duplicate that would not wait
	conflictKind                 string // its problem type
	replay, refusal              int    // the statuses of the retry and of the reused key
	refusalKind                  string // the refusal's problem type
	lostAttempts                 int    // the attempts of the request whose answer was lost
	lostReplayed                 bool   // its last attempt got the replay
	executions                   int64  // how many times an order ran, in all
}

func run(ctx context.Context, out io.Writer) (summary, error) {
	var sum summary
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	// The service: its business handler, and the guard in front of it.
	// A duplicate of a running request waits (up to the wait budget) and
	// gets its response; the hook lets the program see the duplicates that
	// wait, to keep the first order running until the whole storm is in.
	waiting := make(chan struct{}, 4*stormSize)
	records := memstore.New()
	defer records.Close()
	guard, err := middleware.New(records,
		middleware.WithWaitBudget(10*time.Second),
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
		middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
			if e.Kind == middleware.EventWaiting {
				select {
				case waiting <- struct{}{}:
				default: // nobody counts them any more
				}
			}
		})))
	if err != nil {
		return sum, err
	}
	// A service checks its backend at startup, and refuses to start with
	// the error, which names the fix (a missing table: run
	// pgstore.SetupSchema), rather than answer every request with one.
	if err := guard.Check(ctx); err != nil {
		return sum, err
	}
	shop := &orders{}
	// Prefer: wait=0 (RFC 7240) picks the same guard without waiting: a
	// duplicate of a running request is answered 409 at once.
	waits, err := nethttp.New(guard, nethttp.WithKeyRequired(true))
	if err != nil {
		return sum, err
	}
	noWait, err := nethttp.New(guard, nethttp.WithKeyRequired(true), nethttp.WithWaitForResult(false))
	if err != nil {
		return sum, err
	}
	drop := &dropOnce{}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", drop.wrap(preferWait(waits(shop), noWait(shop))))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sum, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: stormSize}}
	defer client.CloseIdleConnections()

	fmt.Fprintf(out, "idemkit quickstart: an order service on %s, guarded by idemkit on the in-memory backend\n", base)

	// 1. A retry storm: the first request runs the order, held until all
	// its duplicates wait for it; they then get its response.
	book := `{"item":"book","quantity":1}`
	shop.hold("order-1", func(ctx context.Context) {
		for range stormSize - 1 {
			select {
			case <-waiting:
			case <-ctx.Done():
				return
			}
		}
	})
	before := shop.executions.Load()
	storm := make([]answer, stormSize)
	var wg sync.WaitGroup
	for i := range storm {
		wg.Go(func() { storm[i] = send(ctx, client, base, "order-1", book, nil) })
	}
	wg.Wait()
	for _, a := range storm {
		switch {
		case a.status == http.StatusCreated && a.replayed:
			sum.stormReplayed++
		case a.status == http.StatusCreated:
			sum.stormExecuted++
		default:
			sum.stormOther++
		}
	}
	fmt.Fprintf(out, "\n1. A retry storm: %d concurrent POST /orders with Idempotency-Key: order-1\n", stormSize)
	fmt.Fprintf(out, "   answers: %s\n", tally(storm))
	fmt.Fprintf(out, "   the order ran %s\n", times(shop.executions.Load()-before))

	// 2. A duplicate that will not wait while the first still runs.
	started, release := make(chan struct{}), make(chan struct{})
	shop.hold("order-2", func(ctx context.Context) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	lamp := `{"item":"lamp","quantity":2}`
	before = shop.executions.Load()
	firstDone := make(chan answer, 1)
	go func() { firstDone <- send(ctx, client, base, "order-2", lamp, nil) }()
	select {
	case <-started:
	case <-ctx.Done():
		return sum, ctx.Err()
	}
	dup := send(ctx, client, base, "order-2", lamp, http.Header{"Prefer": {"wait=0"}})
	close(release)
	first := <-firstDone
	later := send(ctx, client, base, "order-2", lamp, nil)
	sum.conflict, sum.conflictKind = dup.status, dup.problem
	fmt.Fprintln(out, "\n2. A duplicate that will not wait (Prefer: wait=0: a wait budget of 0) while the first still runs")
	fmt.Fprintf(out, "   the duplicate: %s, Retry-After: %s\n", dup, dup.header.Get("Retry-After"))
	fmt.Fprintf(out, "   the first:     %s\n", first)
	fmt.Fprintf(out, "   a later retry: %s\n", later)
	fmt.Fprintf(out, "   the order ran %s\n", times(shop.executions.Load()-before))

	// 3. What a client sees: a replay, and a refusal.
	fmt.Fprintln(out, "\n3. What a client sees")
	retry := send(ctx, client, base, "order-1", book, nil)
	sum.replay = retry.status
	fmt.Fprintln(out, "   order-1 retried after the storm: the recorded answer, replayed")
	fmt.Fprint(out, retry.raw)
	reused := send(ctx, client, base, "order-1", `{"item":"book","quantity":5}`, nil)
	sum.refusal, sum.refusalKind = reused.status, reused.problem
	fmt.Fprintln(out, "\n   order-1 again with another body: refused, nothing runs")
	fmt.Fprint(out, reused.raw)

	// 4. A lost response: the client's Transport gives the request a key
	// and retries it with that key when the connection breaks.
	fmt.Fprintln(out, "\n4. A lost response, recovered by the client's nethttp.Transport")
	attempts := &attemptLog{base: &http.Transport{DisableKeepAlives: true}, out: out}
	retrying := &http.Client{Transport: &nethttp.Transport{Base: attempts}}
	drop.arm()
	before = shop.executions.Load()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(`{"item":"pen","quantity":10}`))
	if err != nil {
		return sum, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := retrying.Do(req)
	if err != nil {
		return sum, fmt.Errorf("the retrying client: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum.lostAttempts = int(attempts.n.Load())
	sum.lostReplayed = resp.Header.Get("Idempotent-Replayed") == "true"
	fmt.Fprintf(out, "   the client got %s: %s", resp.Status, body)
	fmt.Fprintf(out, "   the order ran %s\n", times(shop.executions.Load()-before))

	sum.executions = shop.executions.Load()
	requests := stormSize + 3 + 2 + sum.lostAttempts
	fmt.Fprintf(out, "\n%d requests, 3 orders, %d executions: each order ran exactly once\n", requests, sum.executions)
	fmt.Fprint(out, nextSteps)
	return sum, nil
}

// nextSteps is what the quickstart prints last.
const nextSteps = `
Next steps: the demo service (POST /orders, POST /notes, GET /stats) on
127.0.0.1:8080, in another terminal (it builds every example the first time):
  make serve
then run the first line twice (201, then its replay), and the second (422):
  curl -si localhost:8080/orders -H 'Idempotency-Key: try-1' -H 'Content-Type: application/json' -d '{"item":"book"}'
  curl -si localhost:8080/orders -H 'Idempotency-Key: try-1' -H 'Content-Type: application/json' -d '{"item":"lamp"}'
`

// orders is the business handler: POST /orders runs an order (it counts
// the execution) and answers 201 Created with Location /orders/<n> and
// {"order": <n>, "request": <the request body>}.
type orders struct {
	executions atomic.Int64
	holds      sync.Map // idempotency key → func(ctx): runs while that key's order runs
}

// hold makes the order of key run f (with the request's context) before it
// answers, so that the program can send duplicates while it runs.
func (o *orders) hold(key string, f func(ctx context.Context)) { o.holds.Store(key, f) }

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.executions.Add(1)
	req, _ := io.ReadAll(r.Body)
	if call, ok := middleware.CallInfoFrom(r.Context()); ok {
		if f, ok := o.holds.LoadAndDelete(call.Key); ok {
			f.(func(context.Context))(r.Context())
		}
	}
	if !json.Valid(req) {
		req, _ = json.Marshal(string(req))
	}
	body, _ := json.Marshal(struct {
		Order   int64           `json:"order"`
		Request json.RawMessage `json:"request"`
	}{n, req})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(body, '\n'))
}

// preferWait sends the requests that ask not to wait (Prefer: wait=0, RFC
// 7240) to noWait, and the others to wait.
func preferWait(wait, noWait http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, v := range r.Header.Values("Prefer") {
			for p := range strings.SplitSeq(v, ",") {
				if strings.TrimSpace(p) == "wait=0" {
					noWait.ServeHTTP(w, r)
					return
				}
			}
		}
		wait.ServeHTTP(w, r)
	})
}

// dropOnce loses one answer, as a proxy or a network that fails at the
// worst moment does: once armed, the next request runs to completion (the
// guard records its response), but its connection is closed before any
// byte of the answer is sent.
type dropOnce struct{ armed atomic.Bool }

func (d *dropOnce) arm() { d.armed.Store(true) }

func (d *dropOnce) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.armed.CompareAndSwap(true, false) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&discard{header: http.Header{}}, r)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	})
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// attemptLog is the Transport's base: it prints each attempt it sends.
type attemptLog struct {
	base http.RoundTripper
	out  io.Writer
	n    atomic.Int32
}

func (l *attemptLog) RoundTrip(req *http.Request) (*http.Response, error) {
	n := l.n.Add(1)
	prefix := fmt.Sprintf("   attempt %d: POST /orders, Idempotency-Key: %s (made by the Transport)\n              ", n, req.Header.Get("Idempotency-Key"))
	resp, err := l.base.RoundTrip(req)
	switch {
	case err != nil:
		fmt.Fprintf(l.out, "%sno answer: %v\n", prefix, err)
	case resp.Header.Get("Idempotent-Replayed") == "true":
		fmt.Fprintf(l.out, "%s%s, Idempotent-Replayed: true\n", prefix, resp.Status)
	default:
		fmt.Fprintf(l.out, "%s%s\n", prefix, resp.Status)
	}
	return resp, err
}

// times says n times in words: "once", "2 times".
func times(n int64) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// answer is what one request got.
type answer struct {
	status   int
	replayed bool
	problem  string      // the problem type, for error answers
	header   http.Header // the answer's headers
	raw      string      // the answer as it came, Date aside, indented
	err      error       // the request failed
}

func (a answer) String() string {
	switch {
	case a.err != nil:
		return "no answer: " + a.err.Error()
	case a.replayed:
		return fmt.Sprintf("%d replayed", a.status)
	case a.problem != "":
		return fmt.Sprintf("%d %s", a.status, a.problem)
	}
	return fmt.Sprintf("%d executed", a.status)
}

// send posts body to /orders with the idempotency key and the extra
// headers, and returns what it got.
func send(ctx context.Context, client *http.Client, base, key, body string, extra http.Header) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	resp.Header.Del("Date") // the one header that changes from run to run
	dump, err := httputil.DumpResponse(resp, true)
	if err != nil {
		return answer{err: err}
	}
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", header: resp.Header}
	b, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Type string }
		_ = json.Unmarshal(b, &p)
		a.problem = p.Type[strings.LastIndexByte(p.Type, ':')+1:]
	}
	dump = bytes.ReplaceAll(dump, []byte("\r\n"), []byte("\n"))
	for line := range strings.SplitSeq(strings.TrimRight(string(dump), "\n"), "\n") {
		if line != "" {
			line = "     " + line
		}
		a.raw += line + "\n"
	}
	return a
}

// tally summarises answers, least frequent first: "201 executed ×1, 201
// replayed ×19".
func tally(answers []answer) string {
	counts := map[string]int{}
	var order []string
	for _, a := range answers {
		s := a.String()
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
	}
	sort.SliceStable(order, func(i, j int) bool { return counts[order[i]] < counts[order[j]] })
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%s ×%d", s, counts[s])
	}
	return strings.Join(parts, ", ")
}
