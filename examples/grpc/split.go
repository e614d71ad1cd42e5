package main

import (
	"bytes"
	"io"
	"net"
	"sync"
	"time"
)

// prefaceTimeout bounds how long a new connection may take to send its
// first bytes, by which it is routed.
const prefaceTimeout = 10 * time.Second

// split divides the connections of ln between two listeners: those that
// open with the HTTP/2 connection preface ("PRI * HTTP/2.0…", as every gRPC
// client over plaintext does) go to grpcLn, the others (HTTP/1.1 requests:
// a Prometheus scrape, curl) to httpLn. Each connection is routed by its
// first three bytes, read (within prefaceTimeout) on a goroutine of its
// own, so a slow client holds up no other; the bytes read are handed on
// with the connection. No HTTP/1.x request starts with "PRI", the method
// the preface reserves for this.
//
// Closing both listeners closes ln; a failure of ln closes both, whose
// Accept then returns it.
func split(ln net.Listener) (grpcLn, httpLn net.Listener) {
	s := &splitter{ln: ln}
	s.grpc = s.newSub()
	s.http = s.newSub()
	go s.run()
	return s.grpc, s.http
}

type splitter struct {
	ln         net.Listener
	grpc, http *subListener

	mu     sync.Mutex
	closed int // sub-listeners closed
}

// run accepts ln's connections until it fails, and routes each.
func (s *splitter) run() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.grpc.fail(err)
			s.http.fail(err)
			return
		}
		go s.route(c)
	}
}

// route reads c's first bytes and hands it to the listener they choose.
func (s *splitter) route(c net.Conn) {
	var head [3]byte
	_ = c.SetReadDeadline(time.Now().Add(prefaceTimeout))
	if _, err := io.ReadFull(c, head[:]); err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	to := s.http
	if string(head[:]) == "PRI" {
		to = s.grpc
	}
	to.deliver(&replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(head[:]), c)})
}

// subClosed closes ln once both sub-listeners are closed.
func (s *splitter) subClosed() {
	s.mu.Lock()
	s.closed++
	last := s.closed == 2
	s.mu.Unlock()
	if last {
		_ = s.ln.Close()
	}
}

func (s *splitter) newSub() *subListener {
	return &subListener{s: s, conns: make(chan net.Conn), done: make(chan struct{})}
}

// subListener is one side of a split listener.
type subListener struct {
	s     *splitter
	conns chan net.Conn
	done  chan struct{} // closed by Close or a failure of the listener
	once  sync.Once
	err   error // what Accept returns once done is closed
}

// deliver hands c to Accept, or closes it if the listener is closed.
func (l *subListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// Accept returns the next connection routed here.
func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close stops the sub-listener; the second one closed closes the listener
// they share.
func (l *subListener) Close() error {
	l.end(net.ErrClosed)
	return nil
}

// fail ends the sub-listener with the shared listener's failure.
func (l *subListener) fail(err error) { l.end(err) }

func (l *subListener) end(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
		l.s.subClosed()
	})
}

// Addr returns the shared listener's address.
func (l *subListener) Addr() net.Addr { return l.s.ln.Addr() }

// replayConn is a connection whose first bytes, read to route it, are read
// again before the rest.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }
