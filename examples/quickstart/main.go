// Command quickstart is idemkit's first demo (`make demo`): it starts the
// demo service in-process on a free port with the in-memory backend, fires
// a realistic retry storm at it, prints what each request got, and ends with
// a summary line in which the storm and all its retries account for exactly
// one execution.
//
//	go run ./quickstart
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

func main() {
	sum, err := run(context.Background(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
	if sum.stormExecutions != 1 {
		fmt.Fprintf(os.Stderr, "quickstart: the storm executed %d times; want 1\n", sum.stormExecutions)
		os.Exit(1)
	}
}

// summary counts what the run's requests got.
type summary struct {
	executions, replayed, conflicts, mismatches, rejected int
	stormExecutions                                       int
}

// answer is what one request got.
type answer struct {
	status   int
	replayed bool
	problem  string // the problem type, for error answers
	err      error  // the client gave up or the connection broke
}

func (a answer) String() string {
	switch {
	case a.err != nil:
		return "no answer (client gave up)"
	case a.replayed:
		return fmt.Sprintf("%d replayed", a.status)
	case a.problem != "":
		return fmt.Sprintf("%d %s", a.status, a.problem)
	}
	return fmt.Sprintf("%d executed", a.status)
}

func run(ctx context.Context, out io.Writer) (summary, error) {
	var sum summary
	svc := &demo.Service{}
	records := memstore.New()
	defer records.Close()
	guard, err := middleware.New(records, middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return sum, err
	}
	handler, err := demo.NetHTTP(svc, guard)
	if err != nil {
		return sum, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sum, err
	}
	srv := demo.HTTPServer(handler)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	send := func(ctx context.Context, path, key, body string) answer {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return answer{err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
		b, _ := io.ReadAll(resp.Body)
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			var p struct{ Type string }
			_ = json.Unmarshal(b, &p)
			a.problem = p.Type[strings.LastIndexByte(p.Type, ':')+1:]
		}
		return a
	}

	fmt.Fprintf(out, "idemkit quickstart: the demo service on %s (in-memory backend)\n\n", base)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tscenario\trequests\tanswers\texecutions")
	row := 0
	scenario := func(name string, answers []answer, before int64) {
		row++
		executions := svc.Executions() - before
		for _, a := range answers {
			switch {
			case a.err != nil:
			case a.replayed:
				sum.replayed++
			case a.status == http.StatusConflict:
				sum.conflicts++
			case a.status == http.StatusUnprocessableEntity:
				sum.mismatches++
			case a.status == http.StatusBadRequest || a.status == http.StatusRequestEntityTooLarge:
				sum.rejected++
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\n", row, name, len(answers), tally(answers), executions)
	}

	order := `{"item":"book","quantity":1}`
	// 1. A retry storm: 50 concurrent duplicates while the first one runs.
	before := svc.Executions()
	storm := make([]answer, 50)
	var wg sync.WaitGroup
	for i := range storm {
		wg.Add(1)
		go func() {
			defer wg.Done()
			storm[i] = send(ctx, "/orders?sleep=200ms", "order-7f3a", order)
		}()
	}
	wg.Wait()
	scenario("retry storm: 50 concurrent duplicates", storm, before)
	sum.stormExecutions = int(svc.Executions() - before)

	// 2. A sequential retry after the storm.
	before = svc.Executions()
	retry := send(ctx, "/orders?sleep=200ms", "order-7f3a", order)
	scenario("a later retry of the same request", []answer{retry}, before)
	sum.stormExecutions += int(svc.Executions() - before)

	// 3. The same key with another body.
	before = svc.Executions()
	scenario("the same key with another body", []answer{send(ctx, "/orders", "order-7f3a", `{"item":"lamp","quantity":3}`)}, before)

	// 4. No key where one is required.
	before = svc.Executions()
	scenario("no Idempotency-Key", []answer{send(ctx, "/orders", "", order)}, before)

	// 5. A client that gives up mid-request, then retries.
	before = svc.Executions()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	first := send(short, "/orders?sleep=400ms", "order-disconnect", order)
	cancel()
	second := send(ctx, "/orders?sleep=400ms", "order-disconnect", order)
	scenario("client disconnects mid-request, then retries", []answer{first, second}, before)
	if err := tw.Flush(); err != nil {
		return sum, err
	}

	sum.executions = int(svc.Executions())
	fmt.Fprintf(out, "\nexecutions=%d replayed=%d conflicts=%d mismatches=%d rejected=%d\n",
		sum.executions, sum.replayed, sum.conflicts, sum.mismatches, sum.rejected)
	fmt.Fprintf(out, "the storm and its retries (%d requests) executed the order %d time(s)\n", len(storm)+1, sum.stormExecutions)
	return sum, nil
}

// tally summarises answers, most frequent first: "201 executed ×1, 201
// replayed ×49".
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
	if len(answers) == 1 {
		return order[0]
	}
	sort.SliceStable(order, func(i, j int) bool { return counts[order[i]] < counts[order[j]] })
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%s ×%d", s, counts[s])
	}
	return strings.Join(parts, ", ")
}
