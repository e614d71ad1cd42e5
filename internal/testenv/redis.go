package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const redisMissing = "redis-server was not found on PATH: install Debian's redis-server package (apt-get install redis-server), " +
	"or set IDEMKIT_REDIS_ADDR (and IDEMKIT_REDIS_CLUSTER_ADDRS for the cluster) to use running servers"

// RedisServer is a redis-server the tests can reach at Addr.
type RedisServer struct {
	Addr string // host:port

	mu    sync.Mutex
	dir   string
	port  int
	args  []string
	clock *Clock
	proc  *process
}

var (
	sharedRedis     shared[*RedisServer]
	sharedCluster   shared[*Cluster]
	sharedPostgres  shared[*PostgresServer]
	redisBinaryOnce = sync.OnceValues(func() (string, error) { return lookPath("redis-server") })
)

// shared is a server started once per test binary, on first use.
type shared[T any] struct {
	once sync.Once
	val  T
	err  error
}

func (s *shared[T]) get(t testing.TB, start func() (T, error)) T {
	t.Helper()
	s.once.Do(func() { s.val, s.err = start() })
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.val
}

// Redis returns the package's shared redis-server, started on first use on
// a free loopback port in a temporary directory with appendonly yes and
// appendfsync always. With IDEMKIT_REDIS_ADDR set, that server is used
// instead.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	return sharedRedis.get(t, func() (*RedisServer, error) {
		if addr := os.Getenv("IDEMKIT_REDIS_ADDR"); addr != "" {
			return &RedisServer{Addr: addr}, nil
		}
		return startRedis("redis", nil, nil)
	})
}

// NewRedis starts a redis-server for this test alone, stopped when the test
// ends, for fault tests that stop and restart it. It never uses
// IDEMKIT_REDIS_ADDR. Its configuration is Redis's, with the directives
// the package's servers share (appendonly yes, appendfsync always, no RDB
// snapshots), then extra: more command-line directives, which override
// them ("--appendfsync", "everysec").
func NewRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	return NewRedisWithClock(t, nil, extra...)
}

// NewRedisWithClock is [NewRedis] with the server on clock's wall clock,
// also across Stop and Start (nil: the real clock).
func NewRedisWithClock(t testing.TB, clock *Clock, extra ...string) *RedisServer {
	t.Helper()
	s, err := startRedis("redis-"+Name(t), extra, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	return s
}

func startRedis(name string, extra []string, clock *Clock) (*RedisServer, error) {
	if _, err := redisBinaryOnce(); err != nil {
		return nil, errors.New(redisMissing)
	}
	dir, err := tempDir("idemkit-redis-")
	if err != nil {
		return nil, err
	}
	return launchOnFreePort(name, dir, clock, func(port int) ([]string, error) {
		return append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--appendonly", "yes", "--appendfsync", "always", "--save", "",
			"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
		}, extra...), nil
	})
}

// launchOnFreePort starts redis-server (or a Sentinel) in dir on a free
// loopback port, on clock (nil: the real one), with the arguments args
// makes for that port, and trying another port when the one probed was
// taken before the server bound it.
func launchOnFreePort(name, dir string, clock *Clock, args func(port int) ([]string, error)) (*RedisServer, error) {
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		a, err := args(port)
		if err != nil {
			return nil, err
		}
		s := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, port: port, args: a, clock: clock}
		if lastErr = s.launch(name); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// launch starts the process and waits until it answers PING.
func (s *RedisServer) launch(name string) error {
	bin, err := redisBinaryOnce()
	if err != nil {
		return errors.New(redisMissing)
	}
	p, err := start(name, bin, s.args, filepath.Join(s.dir, "redis.log"), nil, s.clock)
	if err != nil {
		return err
	}
	err = waitFor(p, name, func() error { return expect(s.Addr, "PONG", "PING") })
	if err == nil {
		err = p.ready()
	}
	if err != nil {
		p.stop(syscall.SIGKILL)
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

func (s *RedisServer) kill() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.stop(syscall.SIGKILL)
	}
}

// Stop kills the server (SIGKILL): it is gone at once, as in a crash, and
// its connections break. Only for servers from NewRedis.
func (s *RedisServer) Stop(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("testenv: Stop works only on servers started by NewRedis")
	}
	s.kill()
}

// Start starts a stopped server again on the same port and data directory
// (the AOF keeps its data) and returns when it answers PING.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("testenv: Start works only on servers started by NewRedis")
	}
	if err := s.launch("redis (restarted)"); err != nil {
		t.Fatal(err)
	}
}

// Restart shuts the server down cleanly (SHUTDOWN, which writes the AOF)
// and starts it again.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("testenv: Restart works only on servers started by NewRedis")
	}
	_ = send(s.Addr, "SHUTDOWN")
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.stop(syscall.SIGKILL)
		}
	}
	s.Start(t)
}

// Cluster is a 3-master Redis Cluster.
type Cluster struct {
	Addrs []string
}

// RedisCluster returns the package's shared 3-master Redis Cluster: three
// processes, all 16384 slots assigned, cluster_state:ok on every node
// before it returns. IDEMKIT_REDIS_CLUSTER_ADDRS (comma-separated) points at
// a running cluster instead.
func RedisCluster(t testing.TB) *Cluster {
	t.Helper()
	return sharedCluster.get(t, func() (*Cluster, error) {
		if addrs := os.Getenv("IDEMKIT_REDIS_CLUSTER_ADDRS"); addrs != "" {
			return &Cluster{Addrs: strings.Split(addrs, ",")}, nil
		}
		return startCluster()
	})
}

func startCluster() (*Cluster, error) {
	nodes := make([]*RedisServer, 3)
	for i := range nodes {
		n, err := startRedis(fmt.Sprintf("redis-cluster-%d", i), []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
		}, nil)
		if err != nil {
			return nil, err
		}
		nodes[i] = n
	}
	ranges := [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range nodes {
		if err := expect(n.Addr, "OK", "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(ranges[i][0]), strconv.Itoa(ranges[i][1])); err != nil {
			return nil, fmt.Errorf("testenv: assign slots: %w", err)
		}
	}
	for _, n := range nodes[1:] {
		if err := expect(nodes[0].Addr, "OK", "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port)); err != nil {
			return nil, fmt.Errorf("testenv: cluster meet: %w", err)
		}
	}
	c := &Cluster{}
	for _, n := range nodes {
		c.Addrs = append(c.Addrs, n.Addr)
		err := waitFor(n.proc, "redis cluster node "+n.Addr, func() error {
			info, err := command(n.Addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3"} {
				if !strings.Contains(info, want) {
					return fmt.Errorf("cluster not ready: %q missing", want)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// expect sends a command and checks its reply, a simple or bulk string.
func expect(addr, want string, args ...string) error {
	reply, err := command(addr, args...)
	if err != nil {
		return err
	}
	if reply != want {
		return fmt.Errorf("%s: %q", strings.Join(args, " "), reply)
	}
	return nil
}

// command sends a command on a connection of its own and returns its
// reply, which must be a simple or bulk string.
func command(addr string, args ...string) (string, error) {
	v, err := call(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: the reply %v is not a string", strings.Join(args, " "), v)
	}
	return s, nil
}

// send sends a command without waiting for its reply.
func send(addr string, args ...string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write(encode(args))
	time.Sleep(50 * time.Millisecond) // let the server read it before the connection closes
	return err
}

func encode(args []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

// call sends one command on a connection of its own and returns its reply
// as [respConn.do] does.
func call(addr string, args ...string) (any, error) {
	c, err := dialRESP(addr)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(args...)
}

// respConn is one connection speaking RESP2, for commands that need their
// own connection (WAIT counts the writes of the connection it is sent on)
// or return arrays or integers.
type respConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRESP(addr string) (*respConn, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &respConn{conn: conn, r: bufio.NewReader(conn)}, nil
}

func (c *respConn) close() { _ = c.conn.Close() }

// do sends a command and returns its reply: a simple or bulk string as a
// string (without the '+'), an integer as int64, an array as []any, a nil
// bulk string or array as nil; an error reply is an error.
func (c *respConn) do(args ...string) (any, error) {
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(encode(args)); err != nil {
		return nil, err
	}
	return readRESP(c.r)
}

func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("bad array length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("unexpected RESP line %q", line)
}

// Stall freezes the server (SIGSTOP): connections stay open, nothing is
// answered. Use it on a server of the test's own ([NewRedis]). The returned
// function resumes it; the test's cleanup does too.
func (s *RedisServer) Stall(t testing.TB) (resume func()) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		t.Fatal("testenv: Stall needs a server started by testenv")
	}
	return p.stall(t)
}
