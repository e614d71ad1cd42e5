package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/pgstore"
)

// The environment of the steps program (see stepsProgram).
const (
	journalEnv = "IDEMKIT_STEPS_JOURNAL" // the file every step's execution is appended to
	txEnv      = "IDEMKIT_STEPS_TX"      // "1": each step also inserts its row in the work's transaction
)

// killSteps are the steps of the killed processes' work, in order.
var killSteps = []string{"reserve", "charge", "email"}

// stepsProgram serves POST /work, guarded (key required): three steps,
// each sleeping up to 20 ms inside and between them (so that a kill lands
// inside steps as well as between them), each appending "ran <key> <step>
// <pid>" to the journal when it runs and, once its step is recorded,
// "recorded <key> <step> <pid>"; a step that fails appends "failed". With
// the transactional switch, a step inserts (key, step) into step_effects
// in the work's transaction (pgstore.Tx), which commits with its recovery
// point.
func stepsProgram() cli.Program {
	return cli.Program{Name: "steps", Addr: "127.0.0.1:0", Build: func(d cli.Deps) (cli.Server, func() int64, error) {
		journal, err := os.OpenFile(os.Getenv(journalEnv), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, err
		}
		tx := os.Getenv(txEnv) == "1"
		pid := os.Getpid()
		note := func(what, key, step string) {
			_, _ = fmt.Fprintf(journal, "%s %s %s %d\n", what, key, step, pid)
		}
		work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			var results []string
			for _, step := range killSteps {
				ran := false
				res, err := middleware.Step(r.Context(), step, func(ctx context.Context) ([]byte, error) {
					time.Sleep(rand.N(20 * time.Millisecond))
					if tx {
						t, err := pgstore.Tx(ctx)
						if err != nil {
							return nil, err
						}
						if _, err := t.Exec(ctx, `INSERT INTO step_effects (key, step, pid) VALUES ($1, $2, $3)`, key, step, pid); err != nil {
							return nil, err
						}
					}
					ran = true
					note("ran", key, step)
					return []byte(step + "@" + strconv.Itoa(pid)), nil
				})
				if err != nil {
					note("failed", key, step)
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				if ran {
					note("recorded", key, step)
				}
				results = append(results, string(res))
				time.Sleep(rand.N(20 * time.Millisecond))
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintln(w, strings.Join(results, " "))
		})
		mw, err := nethttp.New(d.Guard, nethttp.WithKeyRequired(true))
		if err != nil {
			return nil, nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("POST /work", mw(work))
		return demo.HTTPServer(mux), func() int64 { return 0 }, nil
	}}
}

// TestStepsRunOnceAcrossKilledProcesses runs work of three steps on three
// child processes sharing a Redis, PostgreSQL (with transactional steps)
// or Firestore server, kills a random process (SIGKILL) every few hundred
// milliseconds and starts another, and retries every key on the live
// processes until it completes. Then, from the journal the steps append
// to: no step ran again once it was recorded, every run that did not end
// in its recording was cut by a kill (or refused because the key was
// taken over), and every key ends with one recorded response, which every
// later retry replays. On PostgreSQL the business rows, written in each
// step's transaction, match the recorded steps exactly: one per key and
// step.
func TestStepsRunOnceAcrossKilledProcesses(t *testing.T) {
	for _, backend := range []string{"redis", "postgres", "firestore"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			args := demotest.BackendArgs(t, backend)
			journal := filepath.Join(t.TempDir(), "journal")
			env := []string{journalEnv + "=" + journal}
			var pool *pgxpool.Pool
			if backend == "postgres" {
				env = append(env, txEnv+"=1")
				var err error
				pool, err = pgxpool.New(t.Context(), args[slices.Index(args, "-postgres-url")+1])
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				if _, err := pool.Exec(t.Context(), `CREATE TABLE step_effects (key text NOT NULL, step text NOT NULL, pid int NOT NULL)`); err != nil {
					t.Fatal(err)
				}
			}
			runKilled(t, args, env, journal, pool)
		})
	}
}

func runKilled(t *testing.T, args, env []string, journal string, pool *pgxpool.Pool) {
	const (
		nodes = 3
		keys  = 24
		kills = 8
	)
	var mu sync.Mutex
	procs := make([]*demotest.Process, 0, nodes)
	for range nodes {
		procs = append(procs, demotest.StartProcess(t, "steps", env, args...))
	}
	killed := map[int]bool{}
	inflight := map[string]int{} // requests under way, by address
	live := func() string {
		mu.Lock()
		defer mu.Unlock()
		return procs[rand.N(len(procs))].Addr
	}
	send := func(ctx context.Context, key string) answer {
		addr := live()
		mu.Lock()
		inflight[addr]++
		mu.Unlock()
		defer func() {
			mu.Lock()
			inflight[addr]--
			mu.Unlock()
		}()
		return post(ctx, addr, "/work", key, `{}`)
	}

	// The clients: every key retried until it completes.
	prefix := testenv.Name(t)
	bodies := make([]string, keys)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for i := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("%s-%d", prefix, i)
			time.Sleep(time.Duration(i) * 90 * time.Millisecond)
			for ctx.Err() == nil {
				a := send(ctx, key)
				if a.err == nil && a.status == http.StatusCreated {
					bodies[i] = a.body
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}

	// between returns the node that recorded a step of a key whose work it
	// has not finished (by the journal: its last step not recorded yet),
	// or -1.
	between := func() int {
		b, err := os.ReadFile(journal)
		if err != nil {
			return -1
		}
		last, done := map[string]string{}, map[string]bool{} // by key: the pid of its last recorded step; finished
		for line := range strings.Lines(string(b)) {
			if fs := strings.Fields(line); len(fs) == 4 && fs[0] == "recorded" {
				last[fs[1]] = fs[3]
				done[fs[1]] = fs[2] == killSteps[len(killSteps)-1]
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for key, pid := range last {
			for j, p := range procs {
				if !done[key] && strconv.Itoa(p.Pid()) == pid {
					return j
				}
			}
		}
		return -1
	}

	// The killer: a node in the middle of some work dies, another starts.
	// It aims at a node between two steps of a key's work when there is
	// one (the key must then resume elsewhere), else at one with requests
	// under way (in a step, or waiting for another's).
	aimed := 0
	for range kills {
		time.Sleep(150*time.Millisecond + rand.N(250*time.Millisecond))
		i := -1
		for wait := time.Now().Add(5 * time.Second); i < 0 && time.Now().Before(wait); {
			if i = between(); i >= 0 {
				aimed++
				break
			}
			mu.Lock()
			for j, p := range procs {
				if inflight[p.Addr] > 0 && (i < 0 || rand.N(2) == 0) {
					i = j
				}
			}
			mu.Unlock()
			if i < 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if i < 0 {
			t.Fatal("no node had work under way for 5 s")
		}
		mu.Lock()
		victim := procs[i]
		mu.Unlock()
		victim.Kill()
		next := demotest.StartProcess(t, "steps", env, args...)
		mu.Lock()
		killed[victim.Pid()] = true
		procs[i] = next
		mu.Unlock()
	}
	wg.Wait()
	for i, b := range bodies {
		if b == "" {
			t.Fatalf("key %d never completed", i)
		}
	}
	// Every key has one recorded response: every retry replays it.
	for i := range keys {
		key := fmt.Sprintf("%s-%d", prefix, i)
		a := send(t.Context(), key)
		if a.err != nil || a.status != http.StatusCreated || a.replayed != "true" || a.body != bodies[i] {
			t.Errorf("key %d: a retry got %v %d replayed=%q %q; want the replay of %q", i, a.err, a.status, a.replayed, a.body, bodies[i])
		}
	}

	// The journal.
	type run struct{ what, pid string }
	runs := map[string][]run{} // by "key step", in order
	f, err := os.Open(journal)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			t.Fatalf("journal line %q", sc.Text())
		}
		runs[fs[1]+" "+fs[2]] = append(runs[fs[1]+" "+fs[2]], run{fs[0], fs[3]})
	}
	total, cut, resumed := 0, 0, 0
	for i := range keys {
		pids := map[string]bool{}
		for _, step := range killSteps {
			ks := fmt.Sprintf("%s-%d %s", prefix, i, step)
			rs := runs[ks]
			for _, r := range rs {
				if r.what == "recorded" {
					pids[r.pid] = true
				}
			}
			recorded := false
			for j, r := range rs {
				switch r.what {
				case "ran":
					total++
					if recorded {
						t.Errorf("%s: ran again (pid %s) after it was recorded: %v", ks, r.pid, rs)
					}
					// A run is followed by its recording or its failure,
					// unless its process was killed.
					ended := false
					for _, n := range rs[j+1:] {
						if n.pid == r.pid && (n.what == "recorded" || n.what == "failed") {
							ended = true
							break
						}
					}
					pid, _ := strconv.Atoi(r.pid)
					if !ended {
						cut++
						mu.Lock()
						k := killed[pid]
						mu.Unlock()
						if !k {
							t.Errorf("%s: a run by pid %s neither recorded nor failed, and its process was not killed: %v", ks, r.pid, rs)
						}
					}
				case "recorded":
					recorded = true
				}
			}
			if !slices.ContainsFunc(rs, func(r run) bool { return r.what == "ran" }) {
				t.Errorf("%s: never ran", ks)
			}
		}
		if len(pids) > 1 {
			resumed++ // its steps were recorded by more than one process
		}
	}
	t.Logf("%d keys, %d processes killed during work (%d between two steps of a key): %d step runs for %d steps; %d runs cut by a kill; %d keys resumed on another process",
		keys, kills, aimed, total, keys*len(killSteps), cut, resumed)
	if aimed == 0 || resumed == 0 {
		t.Error("no kill landed between two steps, or no key resumed on another process: the kills proved nothing")
	}

	if pool != nil {
		rows, err := pool.Query(t.Context(), `SELECT key, step, count(*) FROM step_effects GROUP BY key, step`)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for rows.Next() {
			var k, s string
			var n int
			if err := rows.Scan(&k, &s, &n); err != nil {
				t.Fatal(err)
			}
			counts[k+" "+s] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			for _, step := range killSteps {
				ks := fmt.Sprintf("%s-%d %s", prefix, i, step)
				if counts[ks] != 1 {
					t.Errorf("%s: %d business rows; want exactly 1", ks, counts[ks])
				}
				delete(counts, ks)
			}
		}
		if len(counts) != 0 {
			t.Errorf("business rows of no key: %v", counts)
		}
	}
}
