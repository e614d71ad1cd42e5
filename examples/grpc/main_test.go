package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDemoServer starts the demo on a free port on every backend, drives
// it with a real gRPC client and stops it gracefully.
func TestDemoServer(t *testing.T) { demotest.Run(t, program().Run, checkDemo) }

// TestDemoCluster starts 4 instances of the demo on one shared server of
// every real backend and proves exactly-once across them: concurrent
// duplicate calls spread over the instances execute once in all.
func TestDemoCluster(t *testing.T) {
	demotest.RunCluster(t, program().Run, demotest.ClusterInstances, checkCluster)
}

// unaryAnswer is what one duplicate UnaryCall got.
type unaryAnswer struct {
	resp   *testgrpc.SimpleResponse
	header metadata.MD
	err    error
}

// checkCluster is the gRPC side of demotest.HTTPCluster: for each round,
// with a fresh key, it sends demotest.ClusterDuplicates duplicates of one
// UnaryCall (with x-sleep-ms of the round's demotest.ClusterSleep) at
// once, round-robin over addrs (one connection per instance,
// without the retrying client interceptor). Every answer must be the first
// execution (not replayed), a replay of it (the same response, replayed in
// the header) or Aborted IDEMPOTENCY_KEY_IN_PROGRESS (the demo keeps the
// guard's 2-second wait budget, which duplicates can outwait); exactly one
// must be the first execution; and the x-executions of EmptyCall, summed
// over addrs, must be exactly one per round so far.
func checkCluster(t *testing.T, addrs []string) {
	clients := make([]testgrpc.TestServiceClient, len(addrs))
	for j, addr := range addrs {
		clients[j] = testgrpc.NewTestServiceClient(mustConn(t, addr))
	}
	prefix := testenv.Name(t)
	for round := 1; round <= demotest.ClusterRounds; round++ {
		key := fmt.Sprintf("%s-%d", prefix, round)
		req := &testgrpc.SimpleRequest{ResponseSize: int32(round)}
		began := time.Now()
		answers := demotest.Burst(demotest.ClusterDuplicates, func(i int) unaryAnswer {
			ctx, cancel := context.WithTimeout(t.Context(), demotest.ClusterTimeout)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key,
				"x-sleep-ms", strconv.FormatInt(demotest.ClusterSleep(round).Milliseconds(), 10))
			var header metadata.MD
			resp, err := clients[i%len(clients)].UnaryCall(ctx, req, grpc.Header(&header))
			return unaryAnswer{resp, header, err}
		})
		elapsed := time.Since(began)

		first := -1
		for i, a := range answers {
			if a.err == nil && !grpcinterceptor.Replayed(a.header) {
				if first >= 0 {
					t.Errorf("round %d: two first executions: %v and %v", round, answers[first].resp, a.resp)
				}
				first = i
			}
		}
		if first < 0 {
			t.Fatalf("round %d: no duplicate got the first execution", round)
		}
		want := answers[first].resp
		if len(want.GetPayload().GetBody()) != round || want.GetServerId() == "" {
			t.Errorf("round %d: the first execution answered %v", round, want)
		}
		var replays, inProgress int
		for i, a := range answers {
			switch {
			case i == first:
			case a.err == nil:
				if !grpcinterceptor.Replayed(a.header) || a.resp.GetServerId() != want.GetServerId() ||
					!bytes.Equal(a.resp.GetPayload().GetBody(), want.GetPayload().GetBody()) {
					t.Errorf("round %d, duplicate %d: %v replayed=%v; want a replay of %v", round, i, a.resp, grpcinterceptor.Replayed(a.header), want)
				}
				replays++
			case status.Code(a.err) == codes.Aborted && grpcinterceptor.ErrorInfoOf(a.err).GetReason() == "IDEMPOTENCY_KEY_IN_PROGRESS":
				inProgress++
			default:
				t.Errorf("round %d, duplicate %d (to %s): %v; want the first execution, its replay or Aborted in progress",
					round, i, addrs[i%len(addrs)], a.err)
			}
		}

		perInstance := make([]int64, len(addrs))
		var total int64
		for j, c := range clients {
			var header metadata.MD
			if _, err := c.EmptyCall(t.Context(), &testgrpc.Empty{}, grpc.Header(&header)); err != nil {
				t.Fatalf("EmptyCall at %s: %v", addrs[j], err)
			}
			got := header.Get("x-executions")
			if len(got) != 1 {
				t.Fatalf("EmptyCall at %s: x-executions = %v", addrs[j], got)
			}
			n, err := strconv.ParseInt(got[0], 10, 64)
			if err != nil {
				t.Fatalf("EmptyCall at %s: x-executions = %q", addrs[j], got[0])
			}
			perInstance[j] = n
			total += n
		}
		t.Logf("round %d (sleep %v): %d duplicates in %v: 1 first execution, %d replays, %d in progress; executions per instance %v",
			round, demotest.ClusterSleep(round), len(answers), elapsed.Round(time.Millisecond), replays, inProgress, perInstance)
		if total != int64(round) {
			t.Fatalf("round %d: %d executions over the %d instances (%v), want %d", round, total, len(addrs), perInstance, round)
		}
	}
}

// checkDemo drives the gRPC demo at addr with a real client.
func checkDemo(t *testing.T, addr string) {
	keys, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithMaxAttempts(20),
		grpcinterceptor.WithBackoff(idemkit.Backoff{Base: 10 * time.Millisecond, Max: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(keys))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	prefix := testenv.Name(t) // keys of their own, even on a shared server
	call := func(key string, req *testgrpc.SimpleRequest, md ...string) (*testgrpc.SimpleResponse, metadata.MD, error) {
		cctx := t.Context()
		if key != "" {
			cctx = metadata.AppendToOutgoingContext(cctx, "idempotency-key", prefix+"-"+key)
		}
		if len(md) > 0 {
			cctx = metadata.AppendToOutgoingContext(cctx, md...)
		}
		var header metadata.MD
		resp, err := client.UnaryCall(cctx, req, grpc.Header(&header))
		return resp, header, err
	}

	// A call and its duplicate: one execution, the second replayed.
	resp, h, err := call("a", &testgrpc.SimpleRequest{ResponseSize: 10})
	if err != nil || len(resp.GetPayload().GetBody()) != 10 || resp.GetServerId() != "1" || grpcinterceptor.Replayed(h) {
		t.Fatalf("UnaryCall: %v %v", resp, err)
	}
	if resp, h, err := call("a", &testgrpc.SimpleRequest{ResponseSize: 10}); err != nil || resp.GetServerId() != "1" || !grpcinterceptor.Replayed(h) {
		t.Fatalf("the duplicate: %v %v %v", resp, h, err)
	}
	// The demo requires keys (WithKeyRequired(true)): a call without one
	// (sent without the client interceptor) is refused.
	plain := testgrpc.NewTestServiceClient(mustConn(t, addr))
	if _, err := plain.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.InvalidArgument ||
		grpcinterceptor.ErrorInfoOf(err).GetReason() != "IDEMPOTENCY_KEY_MISSING" {
		t.Fatalf("without a key: %v", err)
	}
	// A business error is recorded and replayed; a transient one is not.
	notFound := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.NotFound), Message: "no such order"}}
	for i := range 2 {
		_, h, err := call("b", notFound)
		if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no such order" || grpcinterceptor.Replayed(h) != (i == 1) {
			t.Fatalf("response_status NotFound, call %d: %v replayed=%v", i, err, grpcinterceptor.Replayed(h))
		}
	}
	unavailable := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.Unavailable), Message: "try later"}}
	plainKeyed := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "c")
	for range 2 {
		if _, err := plain.UnaryCall(plainKeyed, unavailable); status.Code(err) != codes.Unavailable {
			t.Fatalf("response_status Unavailable: %v", err)
		}
	}
	// Duplicates racing a slow first call: one execution.
	var wg sync.WaitGroup
	ids := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			resp, _, err := call("d", &testgrpc.SimpleRequest{ResponseSize: 1}, "x-sleep-ms", "200")
			if err != nil {
				t.Error(err)
				return
			}
			ids <- resp.GetServerId()
		})
	}
	wg.Wait()
	close(ids)
	for id := range ids {
		if id != "5" {
			t.Fatalf("a duplicate got execution %s, want 5", id)
		}
	}
	// Alice and Bob: one key, one request, two callers. Bob's call runs as
	// his own; Alice's retry under her refreshed token replays hers.
	pay := &testgrpc.SimpleRequest{ResponseSize: 3}
	alice, h, err := call("pay", pay, "authorization", "Bearer alice-1")
	if err != nil || alice.GetServerId() != "6" || grpcinterceptor.Replayed(h) {
		t.Fatalf("Alice: %v %v", alice, err)
	}
	if bob, h, err := call("pay", pay, "authorization", "Bearer bob-1"); err != nil || bob.GetServerId() != "7" || grpcinterceptor.Replayed(h) {
		t.Fatalf("Bob with Alice's key: %v replayed=%v %v; want his own execution", bob, grpcinterceptor.Replayed(h), err)
	}
	if again, h, err := call("pay", pay, "authorization", "Bearer alice-2"); err != nil || again.GetServerId() != "6" || !grpcinterceptor.Replayed(h) {
		t.Fatalf("Alice's retry with her refreshed token: %v replayed=%v %v; want her answer", again, grpcinterceptor.Replayed(h), err)
	}
	if _, _, err := call("pay", pay, "authorization", "Bearer mallory"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown credentials: %v; want Unauthenticated", err)
	}
	// EmptyCall is not guarded and reports the executions: a, b, c twice,
	// d, Alice's and Bob's.
	var header metadata.MD
	if _, err := plain.EmptyCall(t.Context(), &testgrpc.Empty{}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("x-executions"); len(got) != 1 || got[0] != "7" {
		t.Fatalf("x-executions = %v, want 7", got)
	}
	// Health and reflection.
	hr, err := healthpb.NewHealthClient(mustConn(t, addr)).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "grpc.testing.TestService"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}
	if !reflected(t, addr, "grpc.testing.TestService") {
		t.Fatal("reflection does not list grpc.testing.TestService")
	}
}

func mustConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// reflected asks the server's reflection service whether it lists service.
func reflected(t *testing.T, addr, service string) bool {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(mustConn(t, addr)).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.CloseSend() }()
	req := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetListServicesResponse().GetService() {
		if s.GetName() == service {
			return true
		}
	}
	return false
}

// TestDemoMetrics starts the demo with -metrics on the memory backend,
// drives its whole contract (gRPC calls, health, reflection) through the
// listener it shares with GET /metrics, and checks what a scrape on the
// same address counts: UnaryCall executed 7 times (a, b, c twice, d,
// Alice's and Bob's calls; c's two are not recorded) and replayed 10
// times (a, b, Alice's retry, the 7 duplicates of d), one call refused
// for its missing key, one EmptyCall let through.
func TestDemoMetrics(t *testing.T) {
	demotest.RunMemory(t, program().Run, []string{"-metrics"}, func(t *testing.T, addr string) {
		checkDemo(t, addr)
		m := demotest.Scrape(t, addr)
		op := []string{"idemkit_operation", testgrpc.TestService_UnaryCall_FullMethodName}
		for _, c := range []struct {
			name    string
			outcome string
			want    float64
		}{
			{"idemkit_call_duration_seconds", "executed", 7},
			{"idemkit_call_duration_seconds", "replayed", 10},
			{"idemkit_call_duration_seconds", "rejected", 1},
			{"idemkit_calls_not_recorded_total", "executed", 2},
		} {
			if n := m.Count(c.name, append([]string{"idemkit_outcome", c.outcome}, op...)...); n != c.want {
				t.Errorf("%s{%s} = %v, want %v", c.name, c.outcome, n, c.want)
			}
		}
		if n := m.Count("idemkit_call_duration_seconds", "idemkit_outcome", "passed-through",
			"idemkit_operation", testgrpc.TestService_EmptyCall_FullMethodName); n != 1 {
			t.Errorf("EmptyCall passed through %v times, want 1", n)
		}
		if n := m.Count("idemkit_backend_operations_total", "idemkit_backend_operation", "complete", "idemkit_backend_result", "ok"); n != 5 {
			t.Errorf("%v completions, want 5 (one per recorded execution)", n)
		}
	})
}
