package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDemoServer starts the demo on a free port on every backend, drives
// it with real clients of the three protocols and stops it gracefully.
func TestDemoServer(t *testing.T) { demotest.Run(t, program().Run, checkDemo) }

// TestDemoCluster starts 4 instances of the demo on one shared server of
// every real backend (each instance its own guard and backend clients) and
// proves exactly-once across them: concurrent duplicate calls on one key,
// spread over the instances and the three protocols, execute once in all.
func TestDemoCluster(t *testing.T) {
	demotest.RunCluster(t, program().Run, demotest.ClusterInstances, checkCluster)
}

// clients are the demo's two procedures over one protocol.
type clients struct {
	unary *connect.Client[testgrpc.SimpleRequest, testgrpc.SimpleResponse]
	empty *connect.Client[testgrpc.Empty, testgrpc.Empty]
}

// protocolOptions are the three protocols: Connect, gRPC and gRPC-Web.
var protocolOptions = [][]connect.ClientOption{nil, {connect.WithGRPC()}, {connect.WithGRPCWeb()}}

// httpClient returns an HTTP client for protocol p (an index of
// protocolOptions), without TLS.
func httpClient(t *testing.T, p int) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP1(true)
	tr.Protocols.SetUnencryptedHTTP2(true)
	if p == 1 {
		tr.Protocols.SetHTTP1(false) // gRPC needs HTTP/2
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// newClients returns clients of addr over protocol p (an index of
// protocolOptions), with opts.
func newClients(t *testing.T, addr string, p int, opts ...connect.ClientOption) clients {
	hc := httpClient(t, p)
	opts = append(append([]connect.ClientOption(nil), protocolOptions[p]...), opts...)
	return clients{
		unary: connect.NewClient[testgrpc.SimpleRequest, testgrpc.SimpleResponse](hc, "http://"+addr+unaryCallProcedure, opts...),
		empty: connect.NewClient[testgrpc.Empty, testgrpc.Empty](hc, "http://"+addr+emptyCallProcedure, opts...),
	}
}

// executions returns the demo's execution count (EmptyCall's X-Executions).
func (c clients) executions(t *testing.T) int64 {
	res, err := c.empty.CallUnary(t.Context(), connect.NewRequest(&testgrpc.Empty{}))
	if err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	n, err := strconv.ParseInt(res.Header().Get("X-Executions"), 10, 64)
	if err != nil {
		t.Fatalf("EmptyCall: X-Executions %q", res.Header().Get("X-Executions"))
	}
	return n
}

// reason returns the ErrorInfo reason of err's details.
func reason(err error) string {
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, _ := d.Value(); v != nil {
			if ei, ok := v.(*errdetails.ErrorInfo); ok {
				return ei.GetReason()
			}
		}
	}
	return ""
}

// checkDemo drives the demo at addr over each protocol: a call and its
// duplicate (one execution, the second replayed), a call without a key
// (refused), a business error (replayed) and a transient one (not), other
// credentials (refused), and the client interceptor's retries with one key.
func checkDemo(t *testing.T, addr string) {
	prefix := testenv.Name(t) // keys of their own, even on a shared server
	executions := int64(0)
	for p := range protocolOptions {
		c := newClients(t, addr, p)
		call := func(key string, msg *testgrpc.SimpleRequest, header ...string) (*connect.Response[testgrpc.SimpleResponse], error) {
			req := connect.NewRequest(msg)
			if key != "" {
				req.Header().Set("Idempotency-Key", fmt.Sprintf("%s-%d-%s", prefix, p, key))
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header().Set(header[i], header[i+1])
			}
			return c.unary.CallUnary(t.Context(), req)
		}
		replayed := func(res *connect.Response[testgrpc.SimpleResponse]) bool {
			return res.Header().Get("Idempotent-Replayed") == "true"
		}
		first, err := call("a", &testgrpc.SimpleRequest{ResponseSize: 10})
		if err != nil || len(first.Msg.GetPayload().GetBody()) != 10 || replayed(first) {
			t.Fatalf("protocol %d: UnaryCall: %v %v", p, first, err)
		}
		executions++
		if again, err := call("a", &testgrpc.SimpleRequest{ResponseSize: 10}); err != nil || !replayed(again) || again.Msg.GetServerId() != first.Msg.GetServerId() {
			t.Fatalf("protocol %d: the duplicate: %v %v", p, again, err)
		}
		if _, err := call("", &testgrpc.SimpleRequest{}); connect.CodeOf(err) != connect.CodeInvalidArgument || reason(err) != "IDEMPOTENCY_KEY_MISSING" {
			t.Fatalf("protocol %d: without a key: %v", p, err)
		}
		notFound := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(connect.CodeNotFound), Message: "no such order"}}
		for i := range 2 {
			_, err := call("b", notFound)
			ce := new(connect.Error)
			if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || ce.Message() != "no such order" || (ce.Meta().Get("Idempotent-Replayed") == "true") != (i == 1) {
				t.Fatalf("protocol %d: response_status NotFound, call %d: %v", p, i, err)
			}
		}
		executions++
		unavailable := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(connect.CodeUnavailable), Message: "try later"}}
		for range 2 {
			if _, err := call("c", unavailable); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("protocol %d: response_status Unavailable: %v", p, err)
			}
			executions++
		}
		if _, err := call("d", &testgrpc.SimpleRequest{}, "Authorization", "Bearer mallory"); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("protocol %d: unknown credentials: %v", p, err)
		}
		// Bob's call with Alice's key runs as his own.
		alice, err := call("e", &testgrpc.SimpleRequest{}, "Authorization", "Bearer alice-1")
		if err != nil {
			t.Fatal(err)
		}
		refreshed, err := call("e", &testgrpc.SimpleRequest{}, "Authorization", "Bearer alice-2")
		if err != nil || !replayed(refreshed) || refreshed.Msg.GetServerId() != alice.Msg.GetServerId() {
			t.Fatalf("protocol %d: Alice's refreshed retry: %v %v", p, refreshed, err)
		}
		bob, err := call("e", &testgrpc.SimpleRequest{}, "Authorization", "Bearer bob-1")
		if err != nil || replayed(bob) {
			t.Fatalf("protocol %d: Bob with Alice's key: %v %v", p, bob, err)
		}
		executions += 2
		if n := c.executions(t); n != executions {
			t.Fatalf("protocol %d: %d executions; want %d", p, n, executions)
		}
		// The health service answers over every protocol.
		for _, service := range []string{"", testService} {
			hr, err := grpchealth.NewClient(httpClient(t, p), "http://"+addr, protocolOptions[p]...).
				Check(t.Context(), &grpchealth.CheckRequest{Service: service})
			if err != nil || hr.Status != grpchealth.StatusServing {
				t.Fatalf("protocol %d: health of %q: %v %v", p, service, hr, err)
			}
		}
	}
	// Server reflection (a bidirectional stream: gRPC over HTTP/2).
	stream := grpcreflect.NewClient(httpClient(t, 1), "http://"+addr, connect.WithGRPC()).NewStream(t.Context())
	services, err := stream.ListServices()
	if err != nil || !slices.Contains(services, testService) {
		t.Fatalf("reflection lists %v, %v; want %s among them", services, err, testService)
	}
	if _, err := stream.Close(); err != nil {
		t.Fatalf("reflection: %v", err)
	}
	// The client interceptor: a duplicate of a slow call retries the
	// in-progress Aborted with the same key until the replay.
	keys, err := connectinterceptor.NewClient(connectinterceptor.WithMaxAttempts(50),
		connectinterceptor.WithBackoff(idemkit.Backoff{Base: 10 * time.Millisecond, Max: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	c := newClients(t, addr, 1, connect.WithInterceptors(keys))
	req := func() *connect.Request[testgrpc.SimpleRequest] {
		r := connect.NewRequest(&testgrpc.SimpleRequest{ResponseSize: 3})
		r.Header().Set("Idempotency-Key", prefix+"-slow")
		r.Header().Set("X-Sleep-Ms", "300")
		return r
	}
	slow := make(chan error, 1)
	go func() {
		_, err := c.unary.CallUnary(t.Context(), req())
		slow <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); c.executions(t) == executions; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow call did not start")
		}
	}
	dup, err := c.unary.CallUnary(t.Context(), req())
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if err != nil || dup.Header().Get("Idempotent-Replayed") != "true" || c.executions(t) != executions+1 {
		t.Fatalf("the duplicate through the client interceptor: %v %v", dup, err)
	}
}

// unaryAnswer is what one duplicate UnaryCall got.
type unaryAnswer struct {
	res *connect.Response[testgrpc.SimpleResponse]
	err error
}

// checkCluster is the Connect side of demotest.HTTPCluster: for each
// round, with a fresh key, it sends demotest.ClusterDuplicates duplicates
// of one UnaryCall (with X-Sleep-Ms of the round's demotest.ClusterSleep)
// at once, round-robin over addrs and the three protocols (without the
// retrying client interceptor). Every answer must be the first execution
// (not replayed), a replay of it or Aborted IDEMPOTENCY_KEY_IN_PROGRESS;
// exactly one must be the first execution; and the executions, summed
// over addrs, must be exactly one per round so far.
func checkCluster(t *testing.T, addrs []string) {
	var cs []clients
	for _, addr := range addrs {
		for p := range protocolOptions {
			cs = append(cs, newClients(t, addr, p))
		}
	}
	prefix := testenv.Name(t)
	for round := 1; round <= demotest.ClusterRounds; round++ {
		key := fmt.Sprintf("%s-%d", prefix, round)
		answers := demotest.Burst(demotest.ClusterDuplicates, func(i int) unaryAnswer {
			req := connect.NewRequest(&testgrpc.SimpleRequest{ResponseSize: int32(round)})
			req.Header().Set("Idempotency-Key", key)
			req.Header().Set("X-Sleep-Ms", strconv.FormatInt(demotest.ClusterSleep(round).Milliseconds(), 10))
			res, err := cs[i%len(cs)].unary.CallUnary(t.Context(), req)
			return unaryAnswer{res, err}
		})
		first := -1
		for i, a := range answers {
			if a.err == nil && a.res.Header().Get("Idempotent-Replayed") != "true" {
				if first >= 0 {
					t.Errorf("round %d: two first executions: %v and %v", round, answers[first].res.Msg, a.res.Msg)
				}
				first = i
			}
		}
		if first < 0 {
			t.Fatalf("round %d: no duplicate got the first execution: %v", round, answers[0].err)
		}
		want := answers[first].res.Msg
		for i, a := range answers {
			switch {
			case i == first:
			case a.err == nil:
				if a.res.Msg.GetServerId() != want.GetServerId() || !bytes.Equal(a.res.Msg.GetPayload().GetBody(), want.GetPayload().GetBody()) {
					t.Errorf("round %d, duplicate %d: %v; want a replay of %v", round, i, a.res.Msg, want)
				}
			case connect.CodeOf(a.err) == connect.CodeAborted && reason(a.err) == "IDEMPOTENCY_KEY_IN_PROGRESS":
			default:
				t.Errorf("round %d, duplicate %d: %v; want the first execution, its replay or Aborted in progress", round, i, a.err)
			}
		}
		var total int64
		for j := range addrs {
			total += cs[j*len(protocolOptions)].executions(t)
		}
		if total != int64(round) {
			t.Fatalf("round %d: %d executions over the %d instances, want %d", round, total, len(addrs), round)
		}
	}
}

// TestDemoMetrics starts the demo with -metrics on the memory backend,
// drives its whole contract (the three protocols, health, reflection)
// through the port that serves GET /metrics too, and checks what a
// scrape counts: UnaryCall executed 19 times (per protocol a, b, c twice,
// Alice's and Bob's calls; and the slow call; c's are not recorded) and
// replayed 10 times (per protocol a, b and Alice's retry; and the slow
// call's duplicate), 3 calls refused for their missing key, and 13
// completions (one per recorded execution). EmptyCall is mounted without
// the interceptor, so the guard never sees it.
func TestDemoMetrics(t *testing.T) {
	demotest.RunMemory(t, program().Run, []string{"-metrics"}, func(t *testing.T, addr string) {
		checkDemo(t, addr)
		m := demotest.Scrape(t, addr)
		op := []string{"idemkit_operation", unaryCallProcedure}
		for _, c := range []struct {
			name    string
			outcome string
			want    float64
		}{
			{"idemkit_call_duration_seconds", "executed", 19},
			{"idemkit_call_duration_seconds", "replayed", 10},
			{"idemkit_call_duration_seconds", "rejected", 3},
			{"idemkit_calls_not_recorded_total", "executed", 6},
		} {
			if n := m.Count(c.name, append([]string{"idemkit_outcome", c.outcome}, op...)...); n != c.want {
				t.Errorf("%s{%s} = %v, want %v", c.name, c.outcome, n, c.want)
			}
		}
		if n := m.Count("idemkit_call_duration_seconds", "idemkit_operation", emptyCallProcedure); n != 0 {
			t.Errorf("EmptyCall counted %v times, want 0", n)
		}
		if n := m.Count("idemkit_backend_operations_total", "idemkit_backend_operation", "complete", "idemkit_backend_result", "ok"); n != 13 {
			t.Errorf("%v completions, want 13 (one per recorded execution)", n)
		}
	})
}
