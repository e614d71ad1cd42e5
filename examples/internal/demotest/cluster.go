package demotest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
)

// The shape of the cluster tests: [ClusterInstances] instances of a demo
// program on one backend server, [ClusterDuplicates] concurrent duplicates
// of one request spread round-robin over them, [ClusterRounds] times with
// a fresh key.
const (
	ClusterInstances  = 4
	ClusterDuplicates = 32
	ClusterRounds     = 3
)

// ClusterSleep is how long the business logic sleeps in round (1-based)
// of the cluster checks: round 1 answers at once (the duplicates race for
// the claim), round 2 sleeps 200 ms (the duplicates arrive while it runs
// and wait for its record), round 3 and later sleep 3 s, past the guard's
// 2-second wait budget (the duplicates are refused as in progress, unless
// they come late enough to find the record).
func ClusterSleep(round int) time.Duration {
	switch round {
	case 1:
		return 0
	case 2:
		return 200 * time.Millisecond
	}
	return 3 * time.Second
}

// ClusterTimeout bounds one duplicate's round trip in the cluster checks:
// a guard against hangs, generous because the Firestore emulator takes
// seconds per conflict when 32 writers contend.
const ClusterTimeout = 2 * time.Minute

// RunCluster runs one subtest per backend that separate processes can
// share (redis, redis-cluster, postgres, mysql, firestore on the emulator,
// dynamodb on dynalite; not memory): it starts one server of that backend, then n instances of run
// on it with the same flags and -addr 127.0.0.1:0, each building its own
// clients (connection pools) as separate nodes would. Once all of them
// listen it calls check with their addresses; then it stops them all and
// fails the test unless each returns nil within 15 seconds.
func RunCluster(t *testing.T, run RunFunc, n int, check func(t *testing.T, addrs []string)) {
	for _, b := range backends() {
		if !b.shared {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			args := b.args(t) // one server (or project) for every instance
			addrs := make([]string, 0, n)
			stops := make([]func(), 0, n)
			defer func() {
				var wg sync.WaitGroup
				for _, stop := range stops {
					wg.Go(stop)
				}
				wg.Wait()
			}()
			for range n {
				addr, stop := start(t, run, args)
				addrs = append(addrs, addr)
				stops = append(stops, stop)
			}
			check(t, addrs)
		})
	}
}

// answer is what one duplicate got.
type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

// Burst sends calls duplicates at once (released together) and returns
// what call answered to each, in order. call(i) is the i-th duplicate.
func Burst[A any](calls int, call func(i int) A) []A {
	out := make([]A, calls)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			<-gate
			out[i] = call(i)
		})
	}
	close(gate)
	wg.Wait()
	return out
}

// HTTPCluster is the client side of the HTTP demos' exactly-once proof
// across nodes: for each of [ClusterRounds] rounds, with a fresh key, it
// posts [ClusterDuplicates] duplicates of one POST /orders?sleep=<the
// round's [ClusterSleep]> at once,
// round-robin over addrs, each on its own connection. Every answer must be
// the first execution (201, not replayed, the request echoed), a replay of
// it (201, Idempotent-Replayed: true, the same Location, Content-Type and
// body) or a refusal while it runs (409 idempotency-key-in-progress with
// Retry-After: the demos keep the guard's 2-second wait budget, which
// duplicates can outwait); exactly one must be the first execution; and
// the executions GET /stats reports, summed over addrs, must be exactly
// one per round so far.
func HTTPCluster(t *testing.T, addrs []string) {
	client := &http.Client{
		Timeout:   ClusterTimeout,
		Transport: &http.Transport{DisableKeepAlives: true},
	}
	defer client.CloseIdleConnections()
	prefix := testenv.Name(t)
	for round := 1; round <= ClusterRounds; round++ {
		key := fmt.Sprintf("%s-%d", prefix, round)
		reqBody := fmt.Sprintf(`{"round":%d,"key":%q}`, round, key)
		path := "/orders?sleep=" + ClusterSleep(round).String()
		began := time.Now()
		answers := Burst(ClusterDuplicates, func(i int) answer {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
				"http://"+addrs[i%len(addrs)]+path, strings.NewReader(reqBody))
			if err != nil {
				return answer{err: err}
			}
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return answer{err: err}
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return answer{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
		})
		elapsed := time.Since(began)

		var first *answer
		for i := range answers {
			a := &answers[i]
			if a.err == nil && a.status == http.StatusCreated && a.header.Get("Idempotent-Replayed") == "" {
				if first != nil {
					t.Errorf("round %d: two first executions: %s and %s", round, first.body, a.body)
				}
				first = a
			}
		}
		if first == nil {
			t.Fatalf("round %d: no duplicate got the first execution: %v", round, summary(answers))
		}
		if !strings.Contains(first.body, `"request":`+reqBody) || first.header.Get("Location") == "" {
			t.Errorf("round %d: the first execution answered %v %s", round, first.header, first.body)
		}
		var replays, inProgress int
		for i, a := range answers {
			switch {
			case &answers[i] == first:
			case a.err != nil:
				t.Errorf("round %d, duplicate %d (to %s): %v", round, i, addrs[i%len(addrs)], a.err)
			case a.status == http.StatusCreated:
				if a.header.Get("Idempotent-Replayed") != "true" || a.body != first.body ||
					a.header.Get("Location") != first.header.Get("Location") ||
					a.header.Get("Content-Type") != first.header.Get("Content-Type") {
					t.Errorf("round %d, duplicate %d: %d %v %s; want a replay of %v %s",
						round, i, a.status, a.header, a.body, first.header, first.body)
				}
				replays++
			case a.status == http.StatusConflict:
				var p struct {
					Type string `json:"type"`
				}
				if err := json.Unmarshal([]byte(a.body), &p); err != nil ||
					p.Type != "urn:idemkit:problem:idempotency-key-in-progress" ||
					a.header.Get("Content-Type") != "application/problem+json" || a.header.Get("Retry-After") == "" {
					t.Errorf("round %d, duplicate %d: 409 %v %s; want the in-progress problem", round, i, a.header, a.body)
				}
				inProgress++
			default:
				t.Errorf("round %d, duplicate %d: %d %v %s; want the first execution, its replay or 409 in progress",
					round, i, a.status, a.header, a.body)
			}
		}

		perInstance := make([]int64, len(addrs))
		var total int64
		for j, addr := range addrs {
			perInstance[j] = httpExecutions(t, client, addr)
			total += perInstance[j]
		}
		t.Logf("round %d (sleep %v): %d duplicates in %v: 1 first execution, %d replays, %d in progress; executions per instance %v",
			round, ClusterSleep(round), len(answers), elapsed.Round(time.Millisecond), replays, inProgress, perInstance)
		if total != int64(round) {
			t.Fatalf("round %d: %d executions over the %d instances (%v), want %d", round, total, len(addrs), perInstance, round)
		}
	}
}

// httpExecutions reads GET /stats at addr.
func httpExecutions(t *testing.T, client *http.Client, addr string) int64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /stats at %s: %v", addr, err)
	}
	defer resp.Body.Close()
	var s struct {
		Executions *int64 `json:"executions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusOK || s.Executions == nil {
		t.Fatalf("GET /stats at %s: %d %v", addr, resp.StatusCode, err)
	}
	return *s.Executions
}

// summary counts the answers by status (or error).
func summary(answers []answer) map[string]int {
	m := map[string]int{}
	for _, a := range answers {
		if a.err != nil {
			m["error: "+a.err.Error()]++
			continue
		}
		m[fmt.Sprintf("%d replayed=%q", a.status, a.header.Get("Idempotent-Replayed"))]++
	}
	return m
}
