package testenv

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// mysqlGreeting reads the handshake a MySQL-protocol server sends on
// connect and returns its server version.
func mysqlGreeting(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	var head [4]byte
	if _, err := r.Read(head[:]); err != nil {
		t.Fatalf("read the handshake: %v", err)
	}
	proto, err := r.ReadByte()
	if err != nil || proto != 10 {
		t.Fatalf("handshake protocol %d (%v); want 10", proto, err)
	}
	v, err := r.ReadString(0)
	if err != nil {
		t.Fatalf("read the server version: %v", err)
	}
	return strings.TrimSuffix(v, "\x00")
}

// TestNewMySQLStopStartStall: a dedicated server greets as MariaDB, is
// unreachable once stopped, greets again once started and restarted, and
// answers nothing while stalled.
func TestNewMySQLStopStartStall(t *testing.T) {
	m := NewMySQL(t)
	if v := mysqlGreeting(t, m.Addr); !strings.Contains(v, "MariaDB") {
		t.Fatalf("server version %q; want MariaDB's", v)
	}
	m.Stop(t)
	if c, err := net.DialTimeout("tcp", m.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the stopped server still accepts connections")
	}
	m.Start(t)
	mysqlGreeting(t, m.Addr)
	m.Restart(t)
	mysqlGreeting(t, m.Addr)

	resume := m.Stall(t)
	c, err := net.DialTimeout("tcp", m.Addr, time.Second)
	if err == nil { // the kernel still accepts; the server must not greet
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err == nil {
			t.Fatal("the stalled server sent its handshake")
		}
		c.Close()
	}
	resume()
	mysqlGreeting(t, m.Addr)
}
