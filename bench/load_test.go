package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
)

// loadEnv names the environment variable that turns the test binary into
// the HTTP load generator: it holds a loadSpec in JSON. [runLoad] starts
// the binary so, as a process of its own, so that the server's work and
// the clients' are two processes' (as in production, where the load comes
// from elsewhere) and neither's cost hides in the other's scheduler or
// garbage collector.
const loadEnv = "IDEMKIT_BENCH_LOAD"

// loadWarmup is how long a load generator runs its requests before it
// measures them.
const loadWarmup = 100 * time.Millisecond

// loadSpec is one run of the load generator.
type loadSpec struct {
	URL      string        // where the requests go (POST)
	Workers  int           // keep-alive clients, one goroutine each
	Duration time.Duration // measured time, after Run's warm-up
	Body     string        // the JSON body of every request
	OneKey   bool          // every request a retry of one key; else a new key each
	// KeyPrefix is the first 19 characters of every Idempotency-Key, which
	// ends in 4 hex digits (the worker) and 12 (its request): 36
	// characters, a UUID's length, which Fiber's idempotency middleware
	// requires.
	KeyPrefix string
}

// TestMain runs the load generator when loadEnv is set (before any test
// flag is parsed), and the tests otherwise.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(loadEnv); ok {
		if err := loadMain(spec, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "load generator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

// runLoad runs the load generator process for spec and returns what it
// measured.
func runLoad(ctx context.Context, spec loadSpec) (Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return Result{}, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return Result{}, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), loadEnv+"="+string(b))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("load generator: %w\n%s", err, stderr.Bytes())
	}
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("load generator: its result: %w\n%s", err, stdout.Bytes())
	}
	return r, nil
}

// loadMain is the load generator: it runs spec's requests with [Run] and
// writes the Result as JSON to out. A request that is not answered 201
// counts as an error.
func loadMain(specJSON string, out io.Writer) error {
	var spec loadSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	if len(spec.KeyPrefix) != 19 {
		return fmt.Errorf("key prefix %q: want 19 characters", spec.KeyPrefix)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: spec.Workers, MaxConnsPerHost: spec.Workers}}
	defer client.CloseIdleConnections()
	ctx := context.Background()
	cycle := func(ctx context.Context, w, i int) error {
		key := fmt.Sprintf("%s%04x-%012x", spec.KeyPrefix, w, i)
		if spec.OneKey {
			key = spec.KeyPrefix + "0000-000000000000"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL, strings.NewReader(spec.Body))
		if err != nil {
			return err
		}
		return postOrder(client, req, key)
	}
	// A new process's first requests open the connections and grow its
	// heap: a run of its own, not measured, before Run's own warm-up, on
	// keys of its own (from 1<<40 on, still 12 hex digits).
	warm := Run(ctx, spec.Workers, loadWarmup, func(ctx context.Context, w, i int) error { return cycle(ctx, w, 1<<40+i) })
	r := Run(ctx, spec.Workers, spec.Duration, cycle)
	r.Cycles += warm.Cycles // the server served them too
	return json.NewEncoder(out).Encode(r)
}

// postOrder sends req, a JSON order, with the idempotency key key, and
// wants 201 Created.
func postOrder(client *http.Client, req *http.Request, key string) error {
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
