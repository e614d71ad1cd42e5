package testenv

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// clockStep is how far the tests move a server's clock; tolerance covers
// the round trips between a reading of the server's clock and the test's.
const (
	clockStep = -5 * time.Second
	tolerance = time.Second
)

// wantShift fails unless read (the server's clock) is off the test's clock
// by want, within tolerance.
func wantShift(t *testing.T, what string, read func() time.Time, want time.Duration) {
	t.Helper()
	before := time.Now()
	got := read()
	off := got.Sub(before)
	if off < want-tolerance || off > want+tolerance {
		t.Fatalf("%s is %v off the test's clock; want %v (±%v)", what, off, want, tolerance)
	}
}

// TestClockShiftsRedisTime: TIME moves back with the clock and forward
// again, while the server runs and across a restart.
func TestClockShiftsRedisTime(t *testing.T) {
	clock := NewClock(t)
	s := NewRedisWithClock(t, clock)
	redisTime := func() time.Time {
		v, err := call(s.Addr, "TIME")
		a, _ := v.([]any)
		if err != nil || len(a) != 2 {
			t.Fatalf("TIME: %v, %v", v, err)
		}
		sec, _ := a[0].(string)
		usec, _ := a[1].(string)
		tsec, err1 := strconv.ParseInt(sec, 10, 64)
		tusec, err2 := strconv.ParseInt(usec, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("TIME: %v", v)
		}
		return time.Unix(tsec, tusec*1000)
	}
	wantShift(t, "TIME", redisTime, 0)
	clock.Set(clockStep)
	wantShift(t, "TIME after the step", redisTime, clockStep)
	s.Restart(t)
	wantShift(t, "TIME after a restart", redisTime, clockStep)
	clock.Set(0)
	wantShift(t, "TIME once the clock is back", redisTime, 0)
}

// TestClockShiftsPostgresClockTimestamp: clock_timestamp() moves back with
// the clock in a backend that was running before the step and in a new
// one, and forward again.
func TestClockShiftsPostgresClockTimestamp(t *testing.T) {
	clock := NewClock(t)
	s := NewPostgresWithClock(t, clock)
	old := pgConnect(t, s) // a backend started before the step
	wantShift(t, "clock_timestamp()", old.clock, 0)
	clock.Set(clockStep)
	wantShift(t, "clock_timestamp() after the step", old.clock, clockStep)
	wantShift(t, "clock_timestamp() in a new backend", pgConnect(t, s).clock, clockStep)
	s.Restart(t)
	wantShift(t, "clock_timestamp() after a restart", pgConnect(t, s).clock, clockStep)
	clock.Set(0)
	wantShift(t, "clock_timestamp() once the clock is back", pgConnect(t, s).clock, 0)
}

// pgConn is a connection speaking just enough of PostgreSQL's protocol
// (trust authentication, simple queries of one text value) for the tests
// of a package that uses the standard library only.
type pgConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func pgConnect(t *testing.T, s *PostgresServer) *pgConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := &pgConn{t: t, conn: conn, r: bufio.NewReader(conn)}
	body := []byte("\x00\x03\x00\x00user\x00idemkit\x00database\x00postgres\x00\x00")
	c.write(0, body)
	c.until('Z')
	return c
}

// write sends a message (typ 0: the startup message, which has no type).
func (c *pgConn) write(typ byte, body []byte) {
	var msg []byte
	if typ != 0 {
		msg = append(msg, typ)
	}
	msg = binary.BigEndian.AppendUint32(msg, uint32(4+len(body)))
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(append(msg, body...)); err != nil {
		c.t.Fatal(err)
	}
}

// until reads messages up to one of type end and returns the first
// column of the last data row.
func (c *pgConn) until(end byte) string {
	c.t.Helper()
	var value string
	for {
		typ, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatal(err)
		}
		var n uint32
		if err := binary.Read(c.r, binary.BigEndian, &n); err != nil {
			c.t.Fatal(err)
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(c.r, body); err != nil {
			c.t.Fatal(err)
		}
		switch typ {
		case 'E':
			c.t.Fatalf("PostgreSQL: %q", body)
		case 'R':
			if binary.BigEndian.Uint32(body) != 0 {
				c.t.Fatalf("PostgreSQL asks for authentication %d", binary.BigEndian.Uint32(body))
			}
		case 'D': // columns, then each column's length and bytes
			l := int32(binary.BigEndian.Uint32(body[2:]))
			value = string(body[6 : 6+l])
		}
		if typ == end {
			return value
		}
	}
}

func (c *pgConn) clock() time.Time {
	c.t.Helper()
	c.write('Q', []byte(`SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`+"\x00"))
	ts, err := time.Parse(time.RFC3339Nano, c.until('Z'))
	if err != nil {
		c.t.Fatal(err)
	}
	return ts
}
