package redisstore_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend makes clients of one kind of deployment.
type backend struct {
	name string
	// newClient returns a new client with its own pool, closed when the
	// test ends.
	newClient func(t testing.TB) redis.UniversalClient
}

// backends are the shared single node and the shared 3-master cluster.
func backends() []backend {
	return []backend{
		{"single", func(t testing.TB) redis.UniversalClient { return nodeClient(t, testenv.Redis(t).Addr) }},
		{"cluster", clusterClient},
	}
}

// nodeClient returns a client of the node at addr that honours ctx
// deadlines, closed when the test ends.
func nodeClient(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterClient returns a client of the shared cluster.
func clusterClient(t testing.TB) redis.UniversalClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefixes holds each test's key prefix.
var prefixes sync.Map // testing.TB → string

// prefix returns the key prefix of the test's own, the same on every call.
func prefix(t testing.TB) string {
	p, _ := prefixes.LoadOrStore(t, testenv.Name(t)+":")
	return p.(string)
}

// newStore returns a store on c under a prefix of the test's own, with its
// script loaded on every master and a connection of c's for pipelines
// (which every call sends) dialled, so that tests that count round trips
// start from there.
func newStore(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithKeyPrefix(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := redisstore.LoadScript(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(context.Background(), "warm-up"); err != nil {
		t.Fatal(err)
	}
	return s
}

// immortal returns the keys under prefix that have no expiry (PTTL -1),
// on every master c reaches.
func immortal(ctx context.Context, c redis.UniversalClient, prefix string) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, n redis.UniversalClient) error {
		iter := n.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			d, err := n.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			if d == -1 { // go-redis reports PTTL's -1 (no expiry) as -1ns
				mu.Lock()
				out = append(out, k)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
		return out, err
	}
	return out, scan(ctx, c)
}

// countKeys returns how many keys there are under prefix, on every master.
func countKeys(ctx context.Context, c redis.UniversalClient, prefix string) (int, error) {
	var n atomic.Int64
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n.Add(1)
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
		return int(n.Load()), err
	}
	err := scan(ctx, c)
	return int(n.Load()), err
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// counter is a client hook that counts round trips: one per command sent
// on its own, one per pipeline.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

func (c *counter) count() int { return int(c.n.Load()) }

// link is a TCP proxy in front of a Redis node, for faults of one client's
// connections: it can stall (forward nothing either way until resumed),
// lose the reply to the next request that contains some bytes (the server
// runs the request; the connection is cut before its reply arrives), and
// cut every connection, refusing new ones until restored.
type link struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cutOff  bool          // connections are closed as they come, until restore
	stalled chan struct{} // non-nil while stalled: closed on resume
	dropOn  []byte        // the next request containing it loses its reply
	dropped atomic.Int32
	conns   []net.Conn
}

// newLink starts a proxy to target, closed when the test ends.
func newLink(t testing.TB, target string) *link {
	t.Helper()
	l, err := startLink(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l
}

// startLink starts a proxy to target; close it with close.
func startLink(target string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{ln: ln, target: target}
	go l.accept()
	return l, nil
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) close() {
	_ = l.ln.Close()
	l.resume()
	l.mu.Lock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
}

// stall stops forwarding until resume.
func (l *link) stall() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stalled == nil {
		l.stalled = make(chan struct{})
	}
}

func (l *link) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stalled != nil {
		close(l.stalled)
		l.stalled = nil
	}
}

// cut closes every connection and refuses new ones (they are closed as
// soon as accepted) until restore.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cutOff = true
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// restore accepts connections again after cut.
func (l *link) restore() {
	l.mu.Lock()
	l.cutOff = false
	l.mu.Unlock()
}

// dropReplyTo arms the loss of the reply to the next request containing b.
func (l *link) dropReplyTo(b string) {
	l.mu.Lock()
	l.dropOn = []byte(b)
	l.mu.Unlock()
}

func (l *link) wait() {
	l.mu.Lock()
	ch := l.stalled
	l.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (l *link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		if l.cutOff {
			l.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		l.conns = append(l.conns, c, s)
		l.mu.Unlock()
		var drop atomic.Bool // this connection's next reply is lost
		go l.pipe(s, c, func([]byte) bool {
			if drop.Load() {
				l.dropped.Add(1)
				_ = c.Close()
				_ = s.Close()
				return false
			}
			return true
		})
		go l.pipe(c, s, func(b []byte) bool {
			l.mu.Lock()
			if l.dropOn != nil && strings.Contains(string(b), string(l.dropOn)) {
				l.dropOn = nil
				drop.Store(true)
			}
			l.mu.Unlock()
			return true
		})
	}
}

// pipe copies from src to dst, chunk by chunk, while pass lets it.
func (l *link) pipe(src, dst net.Conn, pass func([]byte) bool) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.wait()
			if !pass(buf[:n]) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// links puts a link in front of every node a client dials, so that all of
// its connections can be stalled at once: from the client's side, as if
// every server froze.
type links struct {
	mu     sync.Mutex
	by     map[string]*link // by the node's address
	closed bool
}

// newLinks returns an empty set of links, closed when the test ends. Call
// it before making the client that dials through it, so that the client is
// closed first.
func newLinks(t testing.TB) *links {
	ls := &links{by: map[string]*link{}}
	t.Cleanup(func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		ls.closed = true
		for _, l := range ls.by {
			l.close()
		}
	})
	return ls
}

// dial is a go-redis Dialer that dials the node at addr through its link.
func (ls *links) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return nil, net.ErrClosed
	}
	l := ls.by[addr]
	if l == nil {
		var err error
		if l, err = startLink(addr); err != nil {
			ls.mu.Unlock()
			return nil, err
		}
		ls.by[addr] = l
	}
	ls.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, l.addr())
}

// stall stalls every link and returns the function that resumes them.
func (ls *links) stall() (resume func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	all := make([]*link, 0, len(ls.by))
	for _, l := range ls.by {
		l.stall()
		all = append(all, l)
	}
	return func() {
		for _, l := range all {
			l.resume()
		}
	}
}

// cut cuts every link (see link.cut) and returns the function that
// restores them.
func (ls *links) cut() (restore func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	all := make([]*link, 0, len(ls.by))
	for _, l := range ls.by {
		l.cut()
		all = append(all, l)
	}
	return func() {
		for _, l := range all {
			l.restore()
		}
	}
}

// stallableCluster returns a client of the shared cluster whose
// connections all go through links, and the function that stalls them.
func stallableCluster(t testing.TB) (redis.UniversalClient, func() (resume func())) {
	ls := newLinks(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, ContextTimeoutEnabled: true, Dialer: ls.dial})
	t.Cleanup(func() { _ = c.Close() })
	return c, ls.stall
}

// noMaintNotifications turns go-redis's maintenance notifications off: in
// their default auto mode, go-redis v9.23 writes the client's options when
// a server refuses them (Redis before 8), unguarded against the
// connections taken with Conn, which WithWaitForReplicas uses (a data race
// of go-redis's own).
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}
