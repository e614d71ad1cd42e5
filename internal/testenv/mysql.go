package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

const mysqlMissing = "MariaDB (mariadb-install-db and mariadbd, or mysql_install_db and mysqld) was not found on PATH or in /usr/sbin: " +
	"install Debian's mariadb-server package (apt-get install mariadb-server), or set IDEMKIT_MYSQL_DSN to use a running server"

// mysqlInit runs at every start of a server (--init-file): the user the
// tests connect as, with every privilege and no password, and its
// database.
const mysqlInit = `CREATE USER IF NOT EXISTS 'idemkit'@'%';
GRANT ALL PRIVILEGES ON *.* TO 'idemkit'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS idemkit;
`

// MySQLServer is a MariaDB server the tests can reach at DSN.
type MySQLServer struct {
	DSN  string // idemkit@tcp(127.0.0.1:<port>)/idemkit, github.com/go-sql-driver/mysql's form
	Addr string // 127.0.0.1:<port>

	mu    sync.Mutex
	dir   string
	port  int
	bin   string
	cred  *syscall.Credential
	clock *Clock
	extra []string
	proc  *process
}

var sharedMySQL shared[*MySQLServer]

// MySQL returns the package's shared MariaDB server: mariadb-install-db
// into a temporary directory (as an unprivileged user when the tests run
// as root), then mariadbd on a free loopback port with the user "idemkit"
// (no password, every privilege) and its database "idemkit". Durability is
// relaxed for speed (the log is flushed once a second, not at each
// commit). With IDEMKIT_MYSQL_DSN set (github.com/go-sql-driver/mysql's
// form), that server is used instead.
func MySQL(t testing.TB) *MySQLServer {
	t.Helper()
	return sharedMySQL.get(t, func() (*MySQLServer, error) {
		if dsn := os.Getenv("IDEMKIT_MYSQL_DSN"); dsn != "" {
			return &MySQLServer{DSN: dsn}, nil
		}
		return startMySQL("mariadb", nil, nil)
	})
}

// NewMySQL starts a MariaDB server for this test alone, stopped when the
// test ends, for tests that stop, kill, stall or restart it. extra are more
// server arguments after the package's own, which they override
// ("--innodb-flush-log-at-trx-commit=1" for a server that flushes each
// commit to disk).
func NewMySQL(t testing.TB, extra ...string) *MySQLServer {
	t.Helper()
	return NewMySQLWithClock(t, nil, extra...)
}

// NewMySQLWithClock is [NewMySQL] with the server on clock's wall clock,
// also across Restart and Start (nil: the real clock).
func NewMySQLWithClock(t testing.TB, clock *Clock, extra ...string) *MySQLServer {
	t.Helper()
	m, err := startMySQL("mariadb-"+Name(t), clock, extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.stop(syscall.SIGKILL) })
	return m
}

// mysqlBinaries finds the data directory initialiser and the server,
// under MariaDB's names or MySQL's.
func mysqlBinaries() (install, server string, err error) {
	dirs := []string{"/usr/sbin", "/usr/bin", "/usr/local/mysql/bin"}
	for _, names := range [][2]string{{"mariadb-install-db", "mariadbd"}, {"mysql_install_db", "mysqld"}} {
		i, err1 := lookPath(names[0], dirs...)
		s, err2 := lookPath(names[1], dirs...)
		if err1 == nil && err2 == nil {
			return i, s, nil
		}
	}
	return "", "", errors.New(mysqlMissing)
}

// mysqlUser returns credentials to run the server as an unprivileged user
// when the tests run as root (mariadbd refuses root without --user=root),
// or nil when there is none: the server then runs as root with
// --user=root.
func mysqlUser() (*syscall.Credential, int, int) {
	if os.Geteuid() != 0 {
		return nil, -1, -1
	}
	for _, name := range []string{"mysql", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid
		}
	}
	return nil, -1, -1
}

func startMySQL(name string, clock *Clock, extra []string) (*MySQLServer, error) {
	install, server, err := mysqlBinaries()
	if err != nil {
		return nil, err
	}
	cred, uid, gid := mysqlUser()
	dir, err := tempDir("idemkit-mysql-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "init.sql"), []byte(mysqlInit), 0o644); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := chownAll(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data"), "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}
	if os.Geteuid() == 0 && cred == nil {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(install, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testenv: %s: %w\n%s", filepath.Base(install), err, out)
	}
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		m := &MySQLServer{
			DSN: fmt.Sprintf("idemkit@tcp(%s)/idemkit", addr), Addr: addr,
			dir: dir, port: port, bin: server, cred: cred, clock: clock, extra: extra,
		}
		if lastErr = m.launch(name); lastErr == nil {
			return m, nil
		}
	}
	return nil, lastErr
}

// launch starts the server and waits until it accepts connections.
func (m *MySQLServer) launch(name string) error {
	logPath := filepath.Join(m.dir, "mariadb.log")
	before := len(readLines(logPath))
	args := []string{
		"--no-defaults", "--datadir=" + filepath.Join(m.dir, "data"), "--port=" + strconv.Itoa(m.port),
		"--bind-address=127.0.0.1", "--socket=" + filepath.Join(m.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.dir, "mysqld.pid"), "--skip-name-resolve", "--skip-log-bin",
		"--init-file=" + filepath.Join(m.dir, "init.sql"), "--max-connections=400",
		"--innodb-flush-log-at-trx-commit=2", "--innodb-buffer-pool-size=64M", "--innodb-doublewrite=0",
	}
	if os.Geteuid() == 0 && m.cred == nil {
		args = append(args, "--user=root")
	}
	args = append(args, m.extra...)
	proc, err := start(name, m.bin, args, logPath, m.cred, m.clock)
	if err != nil {
		return err
	}
	if err := awaitListening(proc, name, logPath, before, "ready for connections", m.Addr); err != nil {
		return err
	}
	m.mu.Lock()
	m.proc = proc
	m.mu.Unlock()
	return nil
}

func (m *MySQLServer) stop(sig syscall.Signal) {
	m.mu.Lock()
	proc := m.proc
	m.mu.Unlock()
	if proc != nil {
		proc.stop(sig)
	}
}

// own fails the test unless m was started by NewMySQL.
func (m *MySQLServer) own(t testing.TB, what string) {
	t.Helper()
	if m.dir == "" {
		t.Fatalf("testenv: %s works only on servers started by NewMySQL", what)
	}
}

// Stop kills the server (SIGKILL): it is gone at once, as in a crash, and
// its connections break. Start brings it back, recovering its data.
func (m *MySQLServer) Stop(t testing.TB) {
	t.Helper()
	m.own(t, "Stop")
	m.stop(syscall.SIGKILL)
}

// Start starts a stopped server again on the same port and data
// directory and returns when it accepts connections.
func (m *MySQLServer) Start(t testing.TB) {
	t.Helper()
	m.own(t, "Start")
	if err := m.launch("mariadb (restarted)"); err != nil {
		t.Fatal(err)
	}
}

// Restart shuts the server down cleanly (SIGTERM) and starts it again with
// the same data.
func (m *MySQLServer) Restart(t testing.TB) {
	t.Helper()
	m.own(t, "Restart")
	m.stop(syscall.SIGTERM)
	m.Start(t)
}

// Stall freezes the server (SIGSTOP): connections stay open, nothing is
// answered. Use it on a server of the test's own ([NewMySQL]). The returned
// function resumes it; the test's cleanup does too.
func (m *MySQLServer) Stall(t testing.TB) (resume func()) {
	t.Helper()
	m.mu.Lock()
	proc := m.proc
	m.mu.Unlock()
	if proc == nil {
		t.Fatal("testenv: Stall needs a server started by testenv")
	}
	return proc.stall(t)
}
