// Package testenv starts real servers for idemkit's tests: redis-server as
// a single node and as a 3-master Redis Cluster, PostgreSQL, MariaDB,
// Google's Firestore emulator and dynalite (DynamoDB's API). Each runs on a
// free loopback port in a temporary directory and is stopped when the test
// binary ends (call [Main] from TestMain), or when its test ends for the
// dedicated servers of fault tests ([NewRedis], [NewPostgres], [NewMySQL],
// [NewFirestore], [NewDynamo]), which can also be frozen with SIGSTOP
// (Stall) to test a server that stops answering. Dedicated servers and a
// Sentinel group's replica can run on a [Clock] of the test's own
// ([NewRedisWithClock], [NewPostgresWithClock], [NewMySQLWithClock],
// [ReplicaClock]), which moves their wall clock while they run (an
// LD_PRELOAD shim built with cc).
//
// Binaries are found on PATH and, for PostgreSQL, in Debian's
// /usr/lib/postgresql/<version>/bin, for MariaDB in /usr/sbin (dynalite, an
// npm package, where npm install -g puts its command); the emulator's jar
// in the Cloud SDK's usual places. A missing binary fails the test with a
// message naming the package to install. Environment variables point the
// shared servers at running ones instead:
//
//	IDEMKIT_REDIS_ADDR=host:port
//	IDEMKIT_REDIS_CLUSTER_ADDRS=host:port,host:port,host:port
//	IDEMKIT_POSTGRES_URL=postgres://user@host:port/db?sslmode=disable
//	IDEMKIT_MYSQL_DSN=user@tcp(host:port)/db
//	FIRESTORE_EMULATOR_HOST=host:port
//	IDEMKIT_FIRESTORE_EMULATOR_JAR=/path/to/cloud-firestore-emulator.jar
//	IDEMKIT_DYNAMODB_URL=http://host:port
//
// It uses the standard library only, so every module's tests can use it.
package testenv

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 60 * time.Second

// The process registry: every server started by this package, so that Main
// can stop those the tests did not.
var (
	registry   sync.Mutex
	running    = map[*process]bool{}
	tempDirs   []string
	nameSerial atomic.Int64
	runID      = func() string {
		var b [3]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
)

// Main runs the package's tests and then stops every server they started.
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	stopAll()
	os.Exit(code)
}

func stopAll() {
	registry.Lock()
	procs := make([]*process, 0, len(running))
	for p := range running {
		procs = append(procs, p)
	}
	dirs := tempDirs
	tempDirs = nil
	registry.Unlock()
	for _, p := range procs {
		p.stop(syscall.SIGTERM)
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// Name returns a short unique name for the test: [a-z0-9_], at most 40
// bytes, starting with a letter, usable as a key prefix or an SQL
// identifier. It is unique within the process and across runs.
func Name(t testing.TB) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 24 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	fmt.Fprintf(&b, "_%s%d", runID, nameSerial.Add(1))
	return b.String()
}

// process is one server process.
type process struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	log   string        // its log file
	clock *Clock        // its wall clock, nil for the real one
}

// ready checks, once the process answers, that it runs on its clock.
func (p *process) ready() error {
	if p.clock == nil {
		return nil
	}
	return checkShim(p.cmd.Process.Pid)
}

// start runs bin with args as a server process whose output goes to
// logPath, on clock's wall clock when clock is not nil. The process dies
// with the test binary (Pdeathsig).
func start(name, bin string, args []string, logPath string, cred *syscall.Credential, clock *Clock) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	if clock != nil {
		cmd.Env = append(os.Environ(), clock.env()...)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("testenv: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: logPath, clock: clock}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		registry.Lock()
		delete(running, p)
		registry.Unlock()
		close(p.done)
	}()
	registry.Lock()
	running[p] = true
	registry.Unlock()
	return p, nil
}

// stop signals the process and waits for it, killing it after a while.
func (p *process) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the end of the process's log, for failure messages.
func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tempDir makes a directory that outlives the test that asked for it (a
// shared server's) and is removed by Main, readable by others so that a
// server running as another user can reach it.
func tempDir(prefix string) (string, error) {
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return "", err
	}
	registry.Lock()
	tempDirs = append(tempDirs, d)
	registry.Unlock()
	return d, nil
}

// lookPath finds a binary on PATH or in extra directories.
func lookPath(name string, extra ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range extra {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// waitFor polls ready until it succeeds, the process exits or the start
// timeout passes.
func waitFor(p *process, what string, ready func() error) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p != nil && p.exited() {
			return fmt.Errorf("testenv: %s exited while starting:\n%s", p.name, p.tail())
		}
		if last = ready(); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	tail := ""
	if p != nil {
		tail = p.tail()
	}
	return fmt.Errorf("testenv: %s not ready after %v: %v\n%s", what, startTimeout, last, tail)
}

// awaitListening waits until the log at logPath, past its first before
// lines, has said marker and addr accepts a connection, then until proc
// reports ready; a server that does not get there is killed.
func awaitListening(proc *process, name, logPath string, before int, marker, addr string) error {
	err := waitFor(proc, name, func() error {
		lines := readLines(logPath)
		if len(lines) > before && strings.Contains(strings.Join(lines[before:], "\n"), marker) {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return err
			}
			return c.Close()
		}
		return errors.New("not ready yet")
	})
	if err == nil {
		err = proc.ready()
	}
	if err != nil {
		proc.stop(syscall.SIGKILL)
	}
	return err
}

// unprivileged returns credentials to run a server as an unprivileged user
// when the tests run as root (PostgreSQL refuses to run as root), and nil
// otherwise.
func unprivileged() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
	}
	return nil, -1, -1, errors.New("testenv: running as root and neither the postgres nor the nobody user exists to run PostgreSQL as")
}

// chownAll gives a directory tree to uid:gid.
func chownAll(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// readLines reads a file's lines (missing file: none).
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// postgresBinDirs lists Debian's PostgreSQL binary directories, newest
// version first.
func postgresBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	return dirs
}

// stall stops the process and all its descendants (SIGSTOP to its process
// group and to every descendant, since servers such as PostgreSQL start
// their backends in sessions of their own): it keeps its sockets open but
// answers nothing, as a server whose machine froze. The returned function
// resumes them all (SIGCONT); it is also registered with t.Cleanup, and
// calling it twice is harmless.
func (p *process) stall(t testing.TB) (resume func()) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("testenv: stall %s: %v", p.name, err)
	}
	// Stopped, the server starts no new children: its descendants are
	// a fixed set now.
	stopped := descendants(pid)
	for _, c := range stopped {
		_ = syscall.Kill(c, syscall.SIGSTOP)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, c := range stopped {
				_ = syscall.Kill(c, syscall.SIGCONT)
			}
			_ = syscall.Kill(-pid, syscall.SIGCONT)
		})
	}
	t.Cleanup(resume)
	return resume
}

// descendants returns the pids of every process below pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], c)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
