package redislock_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy stands between a client and a real redis-server, one command at a
// time per connection, as a Redis proxy does: it refuses the commands it
// does not know (refuse, and HELLO, so that clients speak RESP2) with an
// error reply, and delays every reply it forwards by delay.
type proxy struct {
	Addr   string
	target string
	refuse map[string]bool
	delay  time.Duration

	mu      sync.Mutex
	conns   []net.Conn
	refused map[string]int // by command name, lower case
}

// refusals returns how many times the proxy refused cmd.
func (p *proxy) refusals(cmd string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused[strings.ToLower(cmd)]
}

// newProxy starts a proxy to the server at target on a free loopback port,
// closed when the test ends.
func newProxy(t *testing.T, target string, delay time.Duration, refuse ...string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{Addr: ln.Addr().String(), target: target, refuse: map[string]bool{"hello": true}, delay: delay, refused: map[string]int{}}
	for _, c := range refuse {
		p.refuse[strings.ToLower(c)] = true
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, server)
	p.mu.Unlock()
	defer client.Close()
	defer server.Close()
	cr, sr := bufio.NewReader(client), bufio.NewReader(server)
	for {
		cmd, raw, err := readCommand(cr)
		if err != nil {
			return
		}
		var reply []byte
		if name := strings.ToLower(cmd); p.refuse[name] {
			p.mu.Lock()
			p.refused[name]++
			p.mu.Unlock()
			reply = []byte(fmt.Sprintf("-ERR unknown command '%s'\r\n", cmd))
		} else {
			if _, err := server.Write(raw); err != nil {
				return
			}
			if reply, err = readReply(sr); err != nil {
				return
			}
		}
		time.Sleep(p.delay)
		if _, err := client.Write(reply); err != nil {
			return
		}
	}
}

// readCommand reads one command (an array of bulk strings) and returns its
// name and its bytes.
func readCommand(r *bufio.Reader) (string, []byte, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	if line[0] != '*' {
		return "", nil, errors.New("proxy: not an array")
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return "", nil, errors.New("proxy: a bad array")
	}
	raw := []byte(line)
	var name string
	for i := range n {
		hdr, err := r.ReadString('\n')
		if err != nil || hdr[0] != '$' {
			return "", nil, errors.New("proxy: not a bulk string")
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil {
			return "", nil, err
		}
		body := make([]byte, size+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return "", nil, err
		}
		if i == 0 {
			name = string(body[:size])
		}
		raw = append(append(raw, hdr...), body...)
	}
	return name, raw, nil
}

// readReply reads one RESP2 reply and returns its bytes.
func readReply(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	raw := []byte(line)
	switch line[0] {
	case '+', '-', ':':
		return raw, nil
	case '$':
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || size < 0 {
			return raw, err
		}
		body := make([]byte, size+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		return append(raw, body...), nil
	case '*':
		n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return nil, err
		}
		for range max(n, 0) {
			el, err := readReply(r)
			if err != nil {
				return nil, err
			}
			raw = append(raw, el...)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("proxy: an unknown reply type %q", line[0])
}
