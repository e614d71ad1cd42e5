package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

const postgresMissing = "PostgreSQL (initdb and postgres) was not found on PATH or in /usr/lib/postgresql/*/bin: " +
	"install Debian's postgresql package (apt-get install postgresql), or set IDEMKIT_POSTGRES_URL to use a running server"

// PostgresServer is a PostgreSQL server the tests can reach at URL.
type PostgresServer struct {
	URL string // postgres://idemkit@127.0.0.1:<port>/postgres?sslmode=disable

	mu    sync.Mutex
	dir   string
	port  int
	bin   string
	cred  *syscall.Credential
	clock *Clock
	extra []string
	proc  *process
}

// Postgres returns the package's shared PostgreSQL server: initdb into a
// temporary directory (as an unprivileged user when the tests run as root),
// then postgres on a free loopback port with trust authentication for the
// user "idemkit". Durability is relaxed for speed (fsync off). With
// IDEMKIT_POSTGRES_URL set, that server is used instead.
func Postgres(t testing.TB) *PostgresServer {
	t.Helper()
	return sharedPostgres.get(t, func() (*PostgresServer, error) {
		if url := os.Getenv("IDEMKIT_POSTGRES_URL"); url != "" {
			return &PostgresServer{URL: url}, nil
		}
		return startPostgres("postgres", nil, nil)
	})
}

// NewPostgres starts a PostgreSQL server for this test alone, stopped when
// the test ends, for tests that restart it. extra are more server
// arguments after the package's own, which they override ("-c",
// "fsync=on" for a server that flushes its commits to disk).
func NewPostgres(t testing.TB, extra ...string) *PostgresServer {
	t.Helper()
	p, err := startPostgres("postgres-"+Name(t), nil, extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop() })
	return p
}

// NewPostgresWithClock is [NewPostgres] with the server (and every backend
// it forks) on clock's wall clock, also across Restart (nil: the real
// clock).
func NewPostgresWithClock(t testing.TB, clock *Clock) *PostgresServer {
	t.Helper()
	p, err := startPostgres("postgres-"+Name(t), clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop() })
	return p
}

func startPostgres(name string, clock *Clock, extra []string) (*PostgresServer, error) {
	dirs := postgresBinDirs()
	initdb, err1 := lookPath("initdb", dirs...)
	postgres, err2 := lookPath("postgres", dirs...)
	if err1 != nil || err2 != nil {
		return nil, errors.New(postgresMissing)
	}
	cred, uid, gid, err := unprivileged()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("idemkit-pg-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if cred != nil {
		if err := chownAll(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(initdb, "-D", data, "-U", "idemkit", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testenv: initdb: %w\n%s", err, out)
	}
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p := &PostgresServer{
			URL: fmt.Sprintf("postgres://idemkit@127.0.0.1:%d/postgres?sslmode=disable", port),
			dir: dir, port: port, bin: postgres, cred: cred, clock: clock, extra: extra,
		}
		if lastErr = p.launch(name); lastErr == nil {
			return p, nil
		}
	}
	return nil, lastErr
}

// launch starts postgres and waits until it accepts connections.
func (p *PostgresServer) launch(name string) error {
	logPath := filepath.Join(p.dir, "postgres.log")
	before := len(readLines(logPath))
	args := []string{
		"-D", filepath.Join(p.dir, "data"), "-p", strconv.Itoa(p.port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400", "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "shared_buffers=64MB",
	}
	args = append(args, p.extra...)
	proc, err := start(name, p.bin, args, logPath, p.cred, p.clock)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	if err := awaitListening(proc, name, logPath, before, "ready to accept connections", addr); err != nil {
		return err
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	return nil
}

func (p *PostgresServer) stop() {
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if proc != nil {
		proc.stop(syscall.SIGINT) // fast shutdown: clean, with a checkpoint
	}
}

// Restart shuts the server down cleanly and starts it again with the same
// data. Only for servers from NewPostgres.
func (p *PostgresServer) Restart(t testing.TB) {
	t.Helper()
	if p.dir == "" {
		t.Fatal("testenv: Restart works only on servers started by NewPostgres")
	}
	p.stop()
	if err := p.launch("postgres (restarted)"); err != nil {
		t.Fatal(err)
	}
}

// Stall freezes the server and its backends (SIGSTOP): connections stay
// open, nothing is answered. Use it on a server of the test's own
// ([NewPostgres]). The returned function resumes it; the test's cleanup
// does too.
func (p *PostgresServer) Stall(t testing.TB) (resume func()) {
	t.Helper()
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if proc == nil {
		t.Fatal("testenv: Stall needs a server started by testenv")
	}
	return proc.stall(t)
}
