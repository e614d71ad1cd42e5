package pgstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// The environment of a child process of TestKilledProcesses: the test
// binary, started with killChildEnv set, runs killChildMain instead of the
// tests (see TestMain).
const (
	killChildEnv   = "PGSTORE_KILL_CHILD"   // "1": run as a child
	killURLEnv     = "PGSTORE_KILL_URL"     // the database
	killRecordsEnv = "PGSTORE_KILL_RECORDS" // the records table, as WithTable takes it
	killOrdersEnv  = "PGSTORE_KILL_ORDERS"  // the orders table, quoted
	killModeEnv    = "PGSTORE_KILL_MODE"    // "transactional" or "plain"
	killWhoEnv     = "PGSTORE_KILL_WHO"     // the child's name: its rows' who, its backends' application_name
	killPrefixEnv  = "PGSTORE_KILL_PREFIX"  // the keys are prefix0 .. prefix<killKeys-1>
)

const (
	killKeys     = 200 // keys each mode guards
	killWorkers  = 8   // goroutines calling middleware.Do in a child
	killMinKills = 5   // children killed in each mode, at least
	killMaxKills = 30  // children killed at most, while no kill has landed in the window
	// killWindow is how long the child's work waits between its insert
	// and its return, so that kills land between the work's write and
	// the record's completion.
	killWindow = 20 * time.Millisecond
	// killChildTimeout bounds one child's life: far beyond what it needs,
	// so that a child that hangs fails the test instead of stalling it.
	killChildTimeout = 3 * time.Minute
)

// killKey returns the i-th key of prefix.
func killKey(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// killChildMain is the child process of TestKilledProcesses: a guard with
// a 1 s lease over its own pool runs middleware.Do for every key, with
// killWorkers goroutines; the work inserts an order row for the key (in
// the guard's transaction in transactional mode, on the pool in plain
// mode), prints "inserted <key>", waits killWindow and returns the row's
// id. It takes the keys in a random order. After each Do it prints "done <key> replayed=<bool>"; a failed Do is
// retried (a key a killed child claimed is busy until its lease runs out).
// It returns 0 once every key is done. It exits when its stdin closes, so
// that it never outlives the test process.
func killChildMain() int {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	url, records, orders := os.Getenv(killURLEnv), os.Getenv(killRecordsEnv), os.Getenv(killOrdersEnv)
	mode, who, prefix := os.Getenv(killModeEnv), os.Getenv(killWhoEnv), os.Getenv(killPrefixEnv)
	transactional := mode == "transactional"
	if !transactional && mode != "plain" {
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// Each worker's transaction holds a connection until its commit; the
	// claims and lease extensions need more.
	cfg.MaxConns = 3 * killWorkers
	cfg.ConnConfig.RuntimeParams["application_name"] = who
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	s, err := New(pool, WithTable(records), WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	g, err := middleware.New(s, middleware.WithLeaseTTL(time.Second), middleware.WithWaitBudget(10*time.Second),
		middleware.WithLogger(logger), fastWaits)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}

	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	insert := `INSERT INTO ` + orders + ` (key, who) VALUES ($1, $2) RETURNING id`
	work := func(ctx context.Context) (int64, error) {
		info, _ := middleware.CallInfoFrom(ctx)
		var db DB = pool
		if transactional {
			tx, err := Tx(ctx)
			if err != nil {
				return 0, err
			}
			db = tx
		}
		var id int64
		if err := db.QueryRow(ctx, insert, info.Key, who).Scan(&id); err != nil {
			return 0, err
		}
		say("inserted %s", info.Key)
		time.Sleep(killWindow)
		return id, nil
	}

	// Each child takes the keys in an order of its own, so that kills
	// land on handlers of keys all over the set.
	keys := make(chan string)
	go func() {
		for _, i := range rand.Perm(killKeys) {
			keys <- killKey(prefix, i)
		}
		close(keys)
	}()
	const maxAttempts = 50
	var wg sync.WaitGroup
	failed := make(chan struct{}, killWorkers)
	for range killWorkers {
		wg.Go(func() {
			for key := range keys {
				for attempt := 1; ; attempt++ {
					_, replayed, err := middleware.Do(ctx, g, key, "order", work)
					if err == nil {
						say("done %s replayed=%v", key, replayed)
						break
					}
					fmt.Fprintf(os.Stderr, "%s: attempt %d: %v\n", key, attempt, err)
					if attempt == maxAttempts {
						failed <- struct{}{}
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		return 1
	}
	return 0
}

// killChild is a running child process of TestKilledProcesses.
type killChild struct {
	cmd    *exec.Cmd
	lines  chan string   // its stdout, line by line; closed when it ends
	exited chan struct{} // closed once it has exited and been waited for
	err    error         // its exit status, set before exited closes
}

// startKillChild runs the test binary as a child with env added to the
// environment. The child is killed when the test ends, if still running;
// its stderr goes to the test log if the test fails.
func startKillChild(t *testing.T, name string, env ...string) *killChild {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append([]string{killChildEnv + "=1"}, env...)...)
	stderr := &guardtest.Log{} // the child's stderr
	cmd.Stderr = stderr
	// The child exits when this pipe closes: when this process ends,
	// however it ends.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &killChild{cmd: cmd, lines: make(chan string), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.kill()
		_ = stdin.Close()
		if t.Failed() {
			t.Logf("stderr of %s (%v):\n%s", name, c.err, stderr.String())
		}
	})
	return c
}

// kill sends SIGKILL to the child and returns once it has exited, its
// remaining output drained.
func (c *killChild) kill() {
	_ = c.cmd.Process.Kill()
	for range c.lines {
	}
	<-c.exited
}

// killRun is what a mode's run of TestKilledProcesses saw.
type killRun struct {
	kills   int // children killed
	hits    int // handlers killed after their insert and before their outcome was recorded
	hitKeys map[string]bool
}

// TestKilledProcesses kills processes (SIGKILL) inside guarded handlers,
// between the work's insert and the record's completion, and then lets a
// last process finish every key. In transactional mode (the insert in
// pgstore.Tx) every key ends with exactly one row and a record that
// replays it: a killed handler's row went with its transaction. In plain
// mode (the insert on the pool) a handler killed in that window leaves its
// row without a record, and the retry inserts a second one: the test
// asserts that such keys end with two rows, so that the window the
// transactional mode closes is shown to be hit.
func TestKilledProcesses(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	figures := map[string]string{}
	for _, mode := range []string{"transactional", "plain"} {
		t.Run(mode, func(t *testing.T) {
			figures[mode] = killedProcesses(t, srv.URL, mode)
		})
	}
	for _, mode := range []string{"transactional", "plain"} {
		if f, ok := figures[mode]; ok {
			t.Logf("%s: %s", mode, f)
		}
	}
}

// killedProcesses runs one mode of TestKilledProcesses and returns its
// figures.
func killedProcesses(t *testing.T, url, mode string) string {
	ctx := t.Context()
	admin := newPool(t, url, 4)
	schema := newSchema(t, admin)
	records := schema + ".records"
	opt := WithTable(records)
	if err := SetupSchema(ctx, admin, opt); err != nil {
		t.Fatal(err)
	}
	s, err := New(admin, opt, WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	orders := ordersTable(t, admin, s)
	inspector, err := middleware.New(s, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "order-"
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, seed))

	run := killRun{hitKeys: map[string]bool{}}
	for n := 1; ; n++ {
		who := fmt.Sprintf("%s_child%d", schema, n)
		c := startKillChild(t, who,
			killURLEnv+"="+url, killRecordsEnv+"="+records, killOrdersEnv+"="+orders,
			killModeEnv+"="+mode, killWhoEnv+"="+who, killPrefixEnv+"="+prefix)
		kill := run.kills < killMinKills || (run.hits == 0 && run.kills < killMaxKills)
		target := 1 + rnd.IntN(20) // inserts to let through before the kill
		pending := map[string]bool{}
		inserts, killed := 0, false
		timeout := time.NewTimer(killChildTimeout)
	read:
		for {
			select {
			case line, ok := <-c.lines:
				if !ok {
					break read
				}
				if inserted := accountLine(pending, line, &inserts); inserted && kill && inserts == target {
					killed = true
					time.Sleep(time.Duration(rnd.IntN(11)) * time.Millisecond)
					// Kill, and account for what it printed before it died.
					_ = c.cmd.Process.Kill()
					for line := range c.lines {
						accountLine(pending, line, &inserts)
					}
					break read
				}
			case <-timeout.C:
				c.kill()
				t.Fatalf("%s still running after %v", who, killChildTimeout)
			}
		}
		timeout.Stop()
		<-c.exited
		if !killed {
			if c.err != nil {
				t.Fatalf("%s: %v", who, c.err)
			}
			break // every key is done
		}
		run.kills++
		waitBackendsGone(t, admin, who)
		for key := range pending {
			if killedInWindow(t, admin, inspector, orders, mode, who, key) {
				run.hits++
				run.hitKeys[key] = true
			}
		}
	}
	if run.hits == 0 {
		t.Fatalf("none of %d kills landed between a handler's insert and its outcome's record", run.kills)
	}

	// Every key replays, on a guard of a fresh pool, without running the
	// work; its value is the id of the row the recorded execution made.
	checkPool := newPool(t, url, 4)
	cs, err := New(checkPool, opt, WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	check, err := middleware.New(cs, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	recorded := make(map[string]int64, killKeys)
	for i := range killKeys {
		key := killKey(prefix, i)
		id, replayed, err := middleware.Do(ctx, check, key, "order", func(context.Context) (int64, error) {
			t.Errorf("the work of %s ran after the last process finished", key)
			return 0, errors.New("the work ran again")
		})
		if err != nil || !replayed {
			t.Errorf("%s: replayed %v, %v; want a replay", key, replayed, err)
			continue
		}
		recorded[key] = id
	}

	rowsOf := ordersByKey(t, admin, orders)
	var duplicates, disagree, total int
	for i := range killKeys {
		key := killKey(prefix, i)
		ids := rowsOf[key]
		total += len(ids)
		if len(ids) >= 2 {
			duplicates++
		}
		id, ok := recorded[key]
		agree := ok && len(ids) == 1 && ids[0] == id
		if !agree {
			disagree++
		}
		switch {
		case mode == "transactional" && !agree:
			t.Errorf("%s: rows %v, record replays %d (recorded %v); want one row, the record's", key, ids, id, ok)
		case mode == "plain" && run.hitKeys[key] && len(ids) < 2:
			t.Errorf("%s: rows %v; want two or more (its handler was killed after its insert)", key, ids)
		}
	}
	if mode == "plain" && duplicates == 0 {
		t.Errorf("no key has two rows after %d kills, %d of them between an insert and its record", run.kills, run.hits)
	}
	f := fmt.Sprintf("%d kills, %d handlers (of %d keys) killed between their insert and their record; %d keys, %d rows, "+
		"%d keys with 2+ rows, %d keys whose rows and record disagree",
		run.kills, run.hits, len(run.hitKeys), killKeys, total, duplicates, disagree)
	t.Log(f)
	return f
}

// accountLine accounts for one line of a child's output: an insert adds its key
// to pending (and counts it in inserts), a done removes it. It reports
// whether the line was an insert.
func accountLine(pending map[string]bool, line string, inserts *int) bool {
	kind, rest, _ := strings.Cut(line, " ")
	key, _, _ := strings.Cut(rest, " ")
	switch kind {
	case "inserted":
		pending[key] = true
		*inserts++
		return true
	case "done":
		delete(pending, key)
	}
	return false
}

// waitBackendsGone waits until the server has no backend left of the
// killed child who: each has ended its statement and rolled back its
// transaction, so nothing the child sent can still land.
func waitBackendsGone(t *testing.T, admin *pgxpool.Pool, who string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, who).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends of the killed %s still there after a minute", n, who)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killedInWindow reports whether the killed child who died after inserting
// key's row and before its outcome was recorded (the key's record is not
// completed), and checks what that left: no row of the child in
// transactional mode (rolled back with the process), its row in plain
// mode (committed, without a record). The rows are read before the
// record, so that a commit landing in between cannot be mistaken for a
// row without a record.
func killedInWindow(t *testing.T, admin *pgxpool.Pool, inspector *middleware.Guard, orders, mode, who, key string) bool {
	t.Helper()
	var rows int
	if err := admin.QueryRow(t.Context(), `SELECT count(*) FROM `+orders+` WHERE key = $1 AND who = $2`, key, who).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	in, ok, err := inspector.Inspect(t.Context(), "", key, false)
	if err != nil {
		t.Fatal(err)
	}
	if ok && in.State == store.StateCompleted {
		return false
	}
	switch {
	case mode == "transactional" && rows != 0:
		t.Errorf("%s: %d rows of %s, killed before its record was completed; want none", key, rows, who)
	case mode == "plain" && rows != 1:
		t.Errorf("%s: %d rows of %s, killed after its insert; want one", key, rows, who)
	}
	return true
}

// ordersByKey returns the ids of the rows of orders, by key, in order.
func ordersByKey(t *testing.T, admin *pgxpool.Pool, orders string) map[string][]int64 {
	t.Helper()
	rows, err := admin.Query(t.Context(), `SELECT key, id FROM `+orders+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Key string
		ID  int64
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]int64{}
	for _, r := range all {
		byKey[r.Key] = append(byKey[r.Key], r.ID)
	}
	return byKey
}
