package testenv_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ping(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "*1\r\n$4\r\nPING\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

func TestRedis(t *testing.T) {
	s := testenv.Redis(t)
	if got := ping(t, s.Addr); got != "+PONG" {
		t.Fatalf("PING: %q", got)
	}
	if testenv.Redis(t) != s {
		t.Fatal("the shared server is not shared")
	}
}

func TestNewRedisStopStart(t *testing.T) {
	s := testenv.NewRedis(t)
	s.Stop(t)
	if _, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		t.Fatal("the server still accepts connections after Stop")
	}
	s.Start(t)
	if got := ping(t, s.Addr); got != "+PONG" {
		t.Fatalf("PING after Start: %q", got)
	}
	s.Restart(t)
	if got := ping(t, s.Addr); got != "+PONG" {
		t.Fatalf("PING after Restart: %q", got)
	}
}

func TestRedisCluster(t *testing.T) {
	c := testenv.RedisCluster(t)
	if len(c.Addrs) != 3 {
		t.Fatalf("%d nodes", len(c.Addrs))
	}
	for _, a := range c.Addrs {
		if got := ping(t, a); got != "+PONG" {
			t.Fatalf("PING %s: %q", a, got)
		}
	}
}

func TestPostgres(t *testing.T) {
	p := testenv.Postgres(t)
	if !strings.HasPrefix(p.URL, "postgres://") {
		t.Fatalf("URL %q", p.URL)
	}
	host := strings.TrimPrefix(p.URL, "postgres://idemkit@")
	host = host[:strings.IndexByte(host, '/')]
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", host, err)
	}
	c.Close()
	n := testenv.NewPostgres(t)
	n.Restart(t)
	if n.URL == p.URL {
		t.Fatal("a dedicated server shares the shared server's address")
	}
}

func TestName(t *testing.T) {
	re := regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)
	a, b := testenv.Name(t), testenv.Name(t)
	if a == b || !re.MatchString(a) || !re.MatchString(b) {
		t.Fatalf("names %q, %q", a, b)
	}
	t.Run("a very long subtest name with spaces and UPPER case and more and more", func(t *testing.T) {
		if n := testenv.Name(t); !re.MatchString(n) {
			t.Fatalf("name %q", n)
		}
	})
}

func TestFirestore(t *testing.T) {
	e := testenv.Firestore(t)
	if e.Host == "" {
		t.Fatal("no host")
	}
	resp, err := http.Get("http://" + e.Host + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := testenv.FirestoreProject(t)
	if strings.Contains(p, "_") || p == "" {
		t.Fatalf("project id %q", p)
	}
	e.Clear(t, p)
}

// answers reports whether c answers within d: it reads one byte.
func answers(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	_, err := c.Read(b[:])
	return err == nil
}

// TestStallPostgres: a stalled server answers nothing, on connections
// opened before the stall too (their backends are stopped as well), and
// answers again once resumed.
func TestStallPostgres(t *testing.T) {
	p := testenv.NewPostgres(t)
	host := strings.TrimPrefix(p.URL, "postgres://idemkit@")
	host = host[:strings.IndexByte(host, '/')]
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// An SSLRequest: the connection's backend answers 'N' (no TLS here).
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil || !answers(c, 5*time.Second) {
		t.Fatalf("no answer to an SSLRequest before the stall: %v", err)
	}
	resume := p.Stall(t)
	startup := []byte("\x00\x03\x00\x00user\x00idemkit\x00database\x00postgres\x00\x00")
	msg := append([]byte{0, 0, 0, byte(4 + len(startup))}, startup...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if answers(c, 500*time.Millisecond) {
		t.Fatal("a stalled server's backend answered")
	}
	resume()
	if !answers(c, 5*time.Second) {
		t.Fatal("no answer after the server was resumed")
	}
}

// TestStallRedis: a stalled server answers nothing until resumed.
func TestStallRedis(t *testing.T) {
	s := testenv.NewRedis(t)
	c, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resume := s.Stall(t)
	fmt.Fprint(c, "*1\r\n$4\r\nPING\r\n")
	if answers(c, 500*time.Millisecond) {
		t.Fatal("a stalled server answered")
	}
	resume()
	if !answers(c, 5*time.Second) {
		t.Fatal("no answer after the server was resumed")
	}
}
