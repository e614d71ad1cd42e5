package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// replTimeout bounds every wait of the replicated servers: a replica coming
// online, Sentinels agreeing, a failover finishing.
const replTimeout = 30 * time.Second

// FailoverResult describes one failover done by [Sentinel.Failover] or
// [ReplicatedCluster.FailoverMaster].
type FailoverResult struct {
	Killed    string        // the master that was killed (SIGKILL), restarted since as a replica
	NewMaster string        // its former replica, master now
	Lag       time.Duration // how long the replica was frozen before the kill (ReplicaLag)
	Promoted  time.Duration // from the kill until NewMaster was master (as the Sentinels / the cluster report it)
	Rejoined  time.Duration // from the kill until Killed was an online replica of NewMaster again
}

// FailoverOption is an option of [Sentinel.Failover] and
// [ReplicatedCluster.FailoverMaster].
type FailoverOption func(*failoverConfig)

type failoverConfig struct {
	lag time.Duration
}

// ReplicaLag makes the replica that will take over lag behind its master
// for d before the master is killed: the replica is frozen (SIGSTOP) and
// a ballast value of 32 MiB is written to the master, which fills the
// replication connection's socket buffers, so that whatever the master
// acknowledges in the d after the ballast without waiting for the replica
// stays in the master's own output buffer and is lost with it; the
// replica is resumed right after the kill. (On a busy machine sending the
// ballast takes a while too, and the replica stays frozen for that time.)
// d must stay well below the Sentinels' down-after time and the cluster's
// node timeout (1 s), so that the frozen replica is still promoted.
// Default: 0 (the replica is as close behind as replication on loopback
// keeps it).
func ReplicaLag(d time.Duration) FailoverOption {
	return func(c *failoverConfig) { c.lag = d }
}

// lagThenKill kills victim, first making replica lag for the options'
// ReplicaLag (ballast is a key served by victim, for the ballast value):
// it returns when the kill was sent, and the lag.
func lagThenKill(t testing.TB, victim, replica *RedisServer, ballast string, opts []FailoverOption) time.Duration {
	t.Helper()
	var cfg failoverConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.lag <= 0 {
		victim.kill()
		return 0
	}
	resume := replica.Stall(t)
	if err := expect(victim.Addr, "OK", "SET", ballast, strings.Repeat("b", 32<<20), "PX", "60000"); err != nil {
		resume()
		t.Fatalf("testenv: the ballast for a lagging replica: %v", err)
	}
	// The lag counts from the ballast's acknowledgement: the writes the
	// master acknowledged while the ballast was still arriving precede it
	// in the replication stream, and fit in the frozen replica's socket
	// buffer.
	time.Sleep(cfg.lag)
	victim.kill()
	resume()
	return cfg.lag
}

// group is the processes of one replicated setup, for the logs of a wait
// that failed and for the cleanup.
type group struct {
	mu      sync.Mutex
	servers []*RedisServer
	dirs    []string
}

func (g *group) add(s *RedisServer) {
	g.mu.Lock()
	g.servers = append(g.servers, s)
	g.mu.Unlock()
}

// close kills every process and removes the temporary directories.
func (g *group) close() {
	g.mu.Lock()
	servers, dirs := g.servers, g.dirs
	g.mu.Unlock()
	for _, s := range servers {
		s.kill()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// logTails t.Logf-s the end of every process's log.
func (g *group) logTails(t testing.TB) {
	t.Helper()
	g.mu.Lock()
	servers := g.servers
	g.mu.Unlock()
	for _, s := range servers {
		s.mu.Lock()
		p := s.proc
		s.mu.Unlock()
		if p != nil {
			t.Logf("testenv: log of %s (%s):\n%s", p.name, s.Addr, p.tail())
		}
	}
}

// await polls cond until it returns nil; after replTimeout it logs every
// process's log tail and fails the test, naming what did not happen.
func (g *group) await(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := g.poll(replTimeout, cond); err != nil {
		g.logTails(t)
		t.Fatalf("testenv: %s did not happen within %v: %v", what, replTimeout, err)
	}
}

func (g *group) poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newDir makes a temporary directory that the group's cleanup removes (and
// Main too, should the cleanup not run).
func (g *group) newDir(prefix string) (string, error) {
	d, err := tempDir(prefix)
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	g.dirs = append(g.dirs, d)
	g.mu.Unlock()
	return d, nil
}

// startNode starts a redis-server (or Sentinel) in a directory of its own on
// a free loopback port, on clock (nil: the real one); args makes its
// arguments for a port and the directory. It logs to redis.log in that directory at level notice, since
// replication and failover events are what a failed wait needs to show.
func (g *group) startNode(name, prefix string, clock *Clock, args func(port int, dir string) ([]string, error)) (*RedisServer, error) {
	if _, err := redisBinaryOnce(); err != nil {
		return nil, errors.New(redisMissing)
	}
	dir, err := g.newDir(prefix)
	if err != nil {
		return nil, err
	}
	s, err := launchOnFreePort(name, dir, clock, func(port int) ([]string, error) { return args(port, dir) })
	if err == nil {
		g.add(s)
	}
	return s, err
}

// dataArgs are the arguments of a replicated data server. Persistence is
// off (appendonly no, save ""): a killed master is restarted as a replica,
// which takes a full copy from its master, so nothing on its disk is needed
// and an AOF would only slow the tests down.
func dataArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "no", "--save", "", "--protected-mode", "no", "--daemonize", "no",
		"--loglevel", "notice", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
	}
}

// restart starts a killed server again on its port and directory, with
// extra arguments added to those it was started with, and waits until it
// answers PING.
func (s *RedisServer) restart(name string, extra ...string) error {
	base := s.args
	s.args = append(append([]string(nil), base...), extra...)
	err := s.launch(name)
	s.args = base
	return err
}

// Sentinel is a Redis master with one replica, watched by three Sentinels,
// for the tests of clients that follow failovers. Start it with
// [NewSentinel].
type Sentinel struct {
	MasterName    string   // the name the Sentinels monitor the master set under
	SentinelAddrs []string // the three Sentinels, host:port
	DataAddrs     []string // the master's and the replica's addresses, in the order they were started (the first was master first)

	g         group
	data      []*RedisServer
	sentinels []*RedisServer
}

// NewSentinel starts, for this test alone, a master and one replica
// (redis-server, persistence off) and three Sentinels (redis-server
// --sentinel, each with its own configuration file, which Sentinel
// rewrites), all on free loopback ports, monitoring the master as
// MasterName with quorum 2, down-after-milliseconds 1000, failover-timeout
// 3000 and parallel-syncs 1. It returns once the replica is online and
// every Sentinel knows the master, the replica and the two other Sentinels.
// Every process is killed and its directory removed when the test ends.
func NewSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	var cfg sentinelConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := &Sentinel{MasterName: "idemkit-" + Name(t)[2:]}
	if len(s.MasterName) > 40 {
		s.MasterName = s.MasterName[:40]
	}
	t.Cleanup(s.g.close)
	for i := range 2 {
		var extra []string
		var clock *Clock
		if i == 1 {
			extra = []string{"--replicaof", "127.0.0.1", strconv.Itoa(s.data[0].port)}
			clock = cfg.replicaClock
		}
		n, err := s.g.startNode(fmt.Sprintf("redis-sentinel-data-%d", i), "idemkit-redis-data-", clock, func(port int, dir string) ([]string, error) {
			return append(dataArgs(port, dir), extra...), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s.data = append(s.data, n)
		s.DataAddrs = append(s.DataAddrs, n.Addr)
	}
	master := s.data[0]
	s.g.await(t, "the replica "+s.data[1].Addr+" online at the master "+master.Addr, func() error {
		return hasOnlineReplicas(master.Addr, 1)
	})
	for i := range 3 {
		n, err := s.g.startNode(fmt.Sprintf("redis-sentinel-%d", i), "idemkit-redis-sentinel-", nil, func(port int, dir string) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			text := strings.Join([]string{
				"port " + strconv.Itoa(port),
				"bind 127.0.0.1",
				"protected-mode no",
				"daemonize no",
				"loglevel notice",
				"dir " + dir,
				fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", s.MasterName, master.port),
				fmt.Sprintf("sentinel down-after-milliseconds %s 1000", s.MasterName),
				fmt.Sprintf("sentinel failover-timeout %s 3000", s.MasterName),
				fmt.Sprintf("sentinel parallel-syncs %s 1", s.MasterName),
				"",
			}, "\n")
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s.sentinels = append(s.sentinels, n)
		s.SentinelAddrs = append(s.SentinelAddrs, n.Addr)
		if err := s.tune(n.Addr); err != nil {
			s.g.logTails(t)
			t.Fatalf("testenv: tune Sentinel %s: %v", n.Addr, err)
		}
	}
	s.awaitSettled(t, master.Addr)
	return s
}

// SentinelOption is an option of [NewSentinel].
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	replicaClock *Clock
}

// ReplicaClock runs the replica (DataAddrs[1]) on clock's wall clock, also
// across its restarts, so that a failover can promote a replica whose
// clock is behind its master's. Default: the real clock.
func ReplicaClock(clock *Clock) SentinelOption {
	return func(c *sentinelConfig) { c.replicaClock = clock }
}

// tune shortens a Sentinel's periods (SENTINEL DEBUG, Redis 7.0 and
// later), as Redis's own Sentinel tests do. The ping period matters most:
// it is min(down-after-milliseconds, 1 s), and a Sentinel that has just
// switched to a new master sends its first PING only one ping period after
// it made the new link, while it counts the down-after time from that same
// moment; with both at 1 s, the Sentinels often saw the new master as down
// for a moment right after a failover, agreed (quorum 2) and failed it
// over again. A ping period of 300 ms avoids that. It must not be much
// shorter: a Sentinel takes a replica's INFO as fresh enough to promote it
// for 5 ping periods, and asks the replicas of a master it sees down for
// INFO once a second, so that with 100 ms about half the attempts ended in
// -failover-abort-no-good-slave and were tried again only 6 s later.
// Asking the other Sentinels every 100 ms, publishing hellos every 200 ms
// and INFO every second make failovers and the readiness checks faster.
// Where SENTINEL DEBUG is missing, down-after-milliseconds is raised to
// 2500 instead, well above the ping period.
func (s *Sentinel) tune(addr string) error {
	_, err := call(addr, "SENTINEL", "DEBUG", "ping-period", "300", "ask-period", "100", "publish-period", "200", "info-period", "1000")
	if err == nil {
		return nil
	}
	return expect(addr, "OK", "SENTINEL", "SET", s.MasterName, "down-after-milliseconds", "2500")
}

// awaitSettled waits until every Sentinel sees master as an healthy master
// with one healthy replica and two other Sentinels.
func (s *Sentinel) awaitSettled(t testing.TB, master string) {
	t.Helper()
	for _, sa := range s.SentinelAddrs {
		s.g.await(t, "Sentinel "+sa+" knowing the master "+master+", its replica and the other Sentinels", func() error {
			return s.settled(sa, master)
		})
	}
}

func (s *Sentinel) settled(sentinel, master string) error {
	v, err := call(sentinel, "SENTINEL", "MASTER", s.MasterName)
	if err != nil {
		return err
	}
	m := fields(v)
	if addr := net.JoinHostPort(m["ip"], m["port"]); addr != master {
		return fmt.Errorf("the master is %s", addr)
	}
	if m["flags"] != "master" || m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" {
		return fmt.Errorf("flags %q, num-other-sentinels %s, num-slaves %s", m["flags"], m["num-other-sentinels"], m["num-slaves"])
	}
	v, err = call(sentinel, "SENTINEL", "REPLICAS", s.MasterName)
	if err != nil {
		return err
	}
	list, _ := v.([]any)
	for _, r := range list {
		f := fields(r)
		if f["flags"] != "slave" || f["master-link-status"] != "ok" {
			return fmt.Errorf("replica %s:%s: flags %q, master-link-status %q", f["ip"], f["port"], f["flags"], f["master-link-status"])
		}
	}
	return nil
}

// Master returns the address of the current master as a majority of the
// Sentinels report it, waiting (bounded) for a majority to agree.
func (s *Sentinel) Master(t testing.TB) string {
	t.Helper()
	var addr string
	s.g.await(t, "a majority of the Sentinels agreeing on the master", func() error {
		var err error
		addr, err = s.reportedMaster("")
		return err
	})
	return addr
}

// reportedMaster returns the master at least two Sentinels report, other
// than not.
func (s *Sentinel) reportedMaster(not string) (string, error) {
	votes := map[string]int{}
	var errs []error
	for _, sa := range s.SentinelAddrs {
		v, err := call(sa, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sa, err))
			continue
		}
		if a, ok := v.([]any); ok && len(a) == 2 {
			host, _ := a[0].(string)
			port, _ := a[1].(string)
			if addr := net.JoinHostPort(host, port); addr != not {
				votes[addr]++
			}
		}
	}
	for addr, n := range votes {
		if n >= 2 {
			return addr, nil
		}
	}
	return "", fmt.Errorf("Sentinels report %v (errors: %v)", votes, errors.Join(errs...))
}

// Failover kills (SIGKILL) the current master, waits until a majority of
// the Sentinels report its replica as the new master and that server's
// ROLE says master, then starts the killed server again on its port as a
// replica of the new master and waits until it is online there and every
// Sentinel sees the new master, healthy, with that replica: the next
// Failover works as this one did. Sentinel would turn the restarted server
// into a replica by itself, but only some 8 s after it came back, and in
// between it would be an empty second master; restarting it with
// --replicaof avoids both.
// With [ReplicaLag] the replica is frozen for a while first.
func (s *Sentinel) Failover(t testing.TB, opts ...FailoverOption) FailoverResult {
	t.Helper()
	old := s.Master(t)
	victim := s.server(t, old)
	if err := hasOnlineReplicas(old, 1); err != nil {
		t.Fatalf("testenv: Failover needs a replica online at the master %s: %v", old, err)
	}
	replica := s.data[0]
	if replica == victim {
		replica = s.data[1]
	}
	var res FailoverResult
	res.Lag = lagThenKill(t, victim, replica, "testenv:ballast", opts)
	start := time.Now()
	res.Killed = old
	s.g.await(t, "a majority of the Sentinels reporting a new master after "+old+" was killed", func() error {
		addr, err := s.reportedMaster(old)
		if err != nil {
			return err
		}
		if role, err := roleOf(addr); err != nil || role != "master" {
			return fmt.Errorf("the Sentinels report %s, whose role is %q (%v)", addr, role, err)
		}
		res.NewMaster = addr
		return nil
	})
	res.Promoted = time.Since(start)
	host, port, _ := net.SplitHostPort(res.NewMaster)
	if err := victim.restart("redis-sentinel-data (restarted)", "--replicaof", host, port); err != nil {
		s.g.logTails(t)
		t.Fatalf("testenv: restart %s: %v", old, err)
	}
	s.g.await(t, "the restarted "+old+" online as a replica of "+res.NewMaster, func() error {
		return hasOnlineReplicas(res.NewMaster, 1)
	})
	res.Rejoined = time.Since(start)
	s.awaitSettled(t, res.NewMaster)
	return res
}

func (s *Sentinel) server(t testing.TB, addr string) *RedisServer {
	t.Helper()
	for _, n := range s.data {
		if n.Addr == addr {
			return n
		}
	}
	t.Fatalf("testenv: the Sentinels report %s as master, which is none of %v", addr, s.DataAddrs)
	return nil
}

// ReplicatedCluster is a Redis Cluster of three masters with one replica
// each. Start it with [NewReplicatedCluster].
type ReplicatedCluster struct {
	g     group
	nodes []*RedisServer
}

// redisCLI is redis-cli, used to create clusters where it is installed.
var redisCLI = sync.OnceValues(func() (string, error) { return lookPath("redis-cli") })

// NewReplicatedCluster starts, for this test alone, a Redis Cluster of
// three masters and three replicas, one per master (persistence off), on
// free loopback ports, with cluster-node-timeout 1000,
// cluster-replica-validity-factor 0 (a replica may always take over) and
// cluster-allow-reads-when-down no; each node keeps its nodes.conf in a
// directory of its own, so a restarted node keeps its identity. It is
// created with redis-cli --cluster create where redis-cli is on PATH, with
// CLUSTER commands otherwise. It returns once every node reports
// cluster_state:ok, all slots are served, every node sees the same three
// masters each with one replica, and every replica is online. Every process
// is killed and its directory removed when the test ends.
func NewReplicatedCluster(t testing.TB) *ReplicatedCluster {
	t.Helper()
	return newReplicatedCluster(t, true)
}

// newReplicatedCluster is NewReplicatedCluster, using redis-cli only if
// useCLI is set (tests of the other way set it false).
func newReplicatedCluster(t testing.TB, useCLI bool) *ReplicatedCluster {
	t.Helper()
	c := &ReplicatedCluster{}
	t.Cleanup(c.g.close)
	for i := range 6 {
		n, err := c.g.startNode(fmt.Sprintf("redis-repl-cluster-%d", i), "idemkit-redis-cluster-", nil, func(port int, dir string) ([]string, error) {
			bus, err := freePort()
			if err != nil {
				return nil, err
			}
			return append(dataArgs(port, dir),
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "1000",
				"--cluster-replica-validity-factor", "0", "--cluster-allow-reads-when-down", "no",
			), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	cli, err := redisCLI()
	if err == nil && useCLI {
		args := []string{"--cluster", "create"}
		args = append(args, c.Addrs()...)
		args = append(args, "--cluster-replicas", "1", "--cluster-yes")
		cmd := exec.Command(cli, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			c.g.logTails(t)
			t.Fatalf("testenv: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	} else {
		c.createWithCommands(t)
	}
	c.awaitHealthy(t, c.nodes)
	return c
}

// createWithCommands gives nodes 0-2 the slots, introduces every node to
// node 0 and makes node i+3 the replica of node i.
func (c *ReplicatedCluster) createWithCommands(t testing.TB) {
	t.Helper()
	ranges := [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, r := range ranges {
		if err := expect(c.nodes[i].Addr, "OK", "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			t.Fatalf("testenv: assign slots: %v", err)
		}
		// Distinct epochs spare the cluster the collision handling.
		if err := expect(c.nodes[i].Addr, "OK", "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			t.Fatalf("testenv: set config epoch: %v", err)
		}
	}
	for _, n := range c.nodes[1:] {
		if err := expect(c.nodes[0].Addr, "OK", "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port), busPort(n)); err != nil {
			t.Fatalf("testenv: cluster meet: %v", err)
		}
	}
	for _, n := range c.nodes {
		c.g.await(t, "node "+n.Addr+" knowing all six nodes", func() error {
			info, err := command(n.Addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_known_nodes:6\r\n") {
				return errors.New("not all nodes known yet")
			}
			return nil
		})
	}
	for i := range 3 {
		id, err := command(c.nodes[i].Addr, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("testenv: cluster myid: %v", err)
		}
		replica := c.nodes[i+3].Addr
		c.g.await(t, "CLUSTER REPLICATE on "+replica, func() error {
			return expect(replica, "OK", "CLUSTER", "REPLICATE", id)
		})
	}
}

// busPort returns the node's cluster bus port from its arguments.
func busPort(n *RedisServer) string {
	for i, a := range n.args {
		if a == "--cluster-port" && i+1 < len(n.args) {
			return n.args[i+1]
		}
	}
	return strconv.Itoa(n.port + 10000)
}

// Addrs returns every node's address, masters and replicas: seed addresses
// for a cluster client. They stay the same across failovers.
func (c *ReplicatedCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Masters returns the current masters' addresses, ordered by the slots
// they serve, as a node that is up reports them.
func (c *ReplicatedCluster) Masters(t testing.TB) []string {
	t.Helper()
	view := c.view(t)
	var masters []string
	for _, n := range view.byFirstSlot() {
		masters = append(masters, n.addr)
	}
	return masters
}

// MasterOf returns the address of the master serving key's slot, as a node
// that is up reports it.
func (c *ReplicatedCluster) MasterOf(t testing.TB, key string) string {
	t.Helper()
	slot := c.slot(t, key)
	n := c.view(t).owner(slot)
	if n == nil {
		t.Fatalf("testenv: no master serves slot %d", slot)
	}
	return n.addr
}

func (c *ReplicatedCluster) slot(t testing.TB, key string) int {
	t.Helper()
	for _, n := range c.up() {
		v, err := call(n.Addr, "CLUSTER", "KEYSLOT", key)
		if err == nil {
			if slot, ok := v.(int64); ok {
				return int(slot)
			}
		}
	}
	t.Fatalf("testenv: no node answers CLUSTER KEYSLOT")
	return 0
}

// FailoverMasterOf is [ReplicatedCluster.FailoverMaster] on the master
// serving key's slot.
func (c *ReplicatedCluster) FailoverMasterOf(t testing.TB, key string, opts ...FailoverOption) FailoverResult {
	t.Helper()
	return c.FailoverMaster(t, c.MasterOf(t, key), opts...)
}

// FailoverMaster kills (SIGKILL) the master at addr, waits until its
// replica has taken over its slots and every surviving node reports
// cluster_state:ok, then starts the killed node again on its port (with
// its nodes.conf, so as the same node; it comes back empty and the cluster
// makes it a replica of the new master) and waits until it is an online
// replica of the new master and the whole cluster is as
// [NewReplicatedCluster] leaves it: the next failover works as this one
// did. With [ReplicaLag] the replica is frozen for a while first.
func (c *ReplicatedCluster) FailoverMaster(t testing.TB, addr string, opts ...FailoverOption) FailoverResult {
	t.Helper()
	var victim *RedisServer
	for _, n := range c.nodes {
		if n.Addr == addr {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("testenv: %s is not a node of the cluster %v", addr, c.Addrs())
	}
	view := c.view(t)
	m := view.byAddr(addr)
	if m == nil || !m.master() || len(m.slots) == 0 {
		t.Fatalf("testenv: %s is not a master serving slots", addr)
	}
	var replica *clusterNode
	for _, n := range view {
		if n.masterID == m.id {
			replica = n
		}
	}
	if replica == nil {
		t.Fatalf("testenv: the master %s has no replica", addr)
	}
	var replicaServer *RedisServer
	for _, n := range c.nodes {
		if n.Addr == replica.addr {
			replicaServer = n
		}
	}
	slot := m.slots[0][0]
	res := FailoverResult{Killed: addr, NewMaster: replica.addr}
	ballast := ""
	for i := 0; ballast == ""; i++ {
		if k := fmt.Sprint("testenv:ballast:", i); view.owner(c.slot(t, k)) == m {
			ballast = k
		}
	}
	res.Lag = lagThenKill(t, victim, replicaServer, ballast, opts)
	start := time.Now()
	c.g.await(t, "the replica "+replica.addr+" taking over the slots of the killed "+addr+" with cluster_state:ok", func() error {
		if role, err := roleOf(replica.addr); err != nil || role != "master" {
			return fmt.Errorf("role of %s: %q (%v)", replica.addr, role, err)
		}
		for _, n := range c.up() {
			if err := clusterOK(n.Addr); err != nil {
				return err
			}
			v, err := readView(n.Addr)
			if err != nil {
				return err
			}
			if o := v.owner(slot); o == nil || o.addr != replica.addr {
				return fmt.Errorf("%s reports another master for slot %d", n.Addr, slot)
			}
		}
		return nil
	})
	res.Promoted = time.Since(start)
	if err := victim.restart(victim.procName()); err != nil {
		c.g.logTails(t)
		t.Fatalf("testenv: restart %s: %v", addr, err)
	}
	c.g.await(t, "the restarted "+addr+" online as a replica of "+replica.addr, func() error {
		v, err := readView(addr)
		if err != nil {
			return err
		}
		if me := v.byAddr(addr); me == nil || me.master() || me.masterID != replica.id {
			return errors.New("not a replica of the new master yet")
		}
		return hasOnlineReplicas(replica.addr, 1)
	})
	res.Rejoined = time.Since(start)
	c.awaitHealthy(t, c.nodes)
	return res
}

func (s *RedisServer) procName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return "redis"
	}
	return strings.TrimSuffix(s.proc.name, " (restarted)") + " (restarted)"
}

// up returns the nodes whose process runs.
func (c *ReplicatedCluster) up() []*RedisServer {
	var up []*RedisServer
	for _, n := range c.nodes {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p != nil && !p.exited() {
			up = append(up, n)
		}
	}
	return up
}

// view returns the cluster as the first node that answers sees it.
func (c *ReplicatedCluster) view(t testing.TB) clusterView {
	t.Helper()
	var last error
	for _, n := range c.up() {
		v, err := readView(n.Addr)
		if err == nil {
			return v
		}
		last = err
	}
	t.Fatalf("testenv: no cluster node answers CLUSTER NODES: %v", last)
	return nil
}

// awaitHealthy waits until every node reports cluster_state:ok with all
// slots served, sees the same three masters with one replica each and no
// node failing, and every master has its replica online.
func (c *ReplicatedCluster) awaitHealthy(t testing.TB, nodes []*RedisServer) {
	t.Helper()
	c.g.await(t, "a healthy cluster (every node ok, three masters with one online replica each)", func() error {
		var first string
		for _, n := range nodes {
			if err := clusterOK(n.Addr); err != nil {
				return err
			}
			v, err := readView(n.Addr)
			if err != nil {
				return err
			}
			if len(v) != 6 {
				return fmt.Errorf("%s knows %d nodes", n.Addr, len(v))
			}
			var masters []string
			replicas := map[string]int{}
			for _, cn := range v {
				if strings.Contains(cn.flags, "fail") || strings.Contains(cn.flags, "handshake") || strings.Contains(cn.flags, "noaddr") {
					return fmt.Errorf("%s reports %s as %s", n.Addr, cn.addr, cn.flags)
				}
				if cn.master() {
					masters = append(masters, cn.id)
				} else {
					replicas[cn.masterID]++
				}
			}
			if len(masters) != 3 {
				return fmt.Errorf("%s reports %d masters", n.Addr, len(masters))
			}
			for _, m := range masters {
				if replicas[m] != 1 {
					return fmt.Errorf("%s reports %d replicas of %s", n.Addr, replicas[m], m)
				}
			}
			desc := ""
			for _, m := range v.byFirstSlot() {
				desc += m.id + " "
			}
			if first == "" {
				first = desc
			} else if desc != first {
				return fmt.Errorf("nodes disagree on the masters: %s / %s", first, desc)
			}
			for _, cn := range v {
				if cn.master() && strings.Contains(cn.flags, "myself") {
					if err := hasOnlineReplicas(n.Addr, 1); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

func clusterOK(addr string) error {
	info, err := command(addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384"} {
		if !strings.Contains(info, want+"\r\n") {
			return fmt.Errorf("%s: %q missing from CLUSTER INFO", addr, want)
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, flags, masterID string
	slots                     [][2]int
}

func (n *clusterNode) master() bool { return strings.Contains(n.flags, "master") }

type clusterView []*clusterNode

func readView(addr string) (clusterView, error) {
	text, err := command(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var v clusterView
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("%s: CLUSTER NODES line %q", addr, line)
		}
		a := f[1]
		if i := strings.IndexAny(a, "@,"); i >= 0 {
			a = a[:i]
		}
		n := &clusterNode{id: f[0], addr: a, flags: f[2], masterID: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated
				continue
			}
			lo, hi, found := strings.Cut(s, "-")
			if !found {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: slot range %q", addr, s)
			}
			n.slots = append(n.slots, [2]int{l, h})
		}
		v = append(v, n)
	}
	return v, nil
}

func (v clusterView) byAddr(addr string) *clusterNode {
	for _, n := range v {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

func (v clusterView) owner(slot int) *clusterNode {
	for _, n := range v {
		if !n.master() || strings.Contains(n.flags, "fail") {
			continue
		}
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return n
			}
		}
	}
	return nil
}

// byFirstSlot returns the masters serving slots, ordered by their lowest
// slot.
func (v clusterView) byFirstSlot() []*clusterNode {
	var out []*clusterNode
	for _, n := range v {
		if n.master() && len(n.slots) > 0 && !strings.Contains(n.flags, "fail") {
			out = append(out, n)
		}
	}
	low := func(n *clusterNode) int {
		m := 16384
		for _, r := range n.slots {
			m = min(m, r[0])
		}
		return m
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && low(out[j]) < low(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// hasOnlineReplicas checks that the server at addr is a master with n
// replicas connected, all in state online.
func hasOnlineReplicas(addr string, n int) error {
	info, err := command(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:master\r\n") {
		return fmt.Errorf("%s is not a master", addr)
	}
	if !strings.Contains(info, fmt.Sprintf("connected_slaves:%d\r\n", n)) {
		return fmt.Errorf("%s has not %d replicas connected", addr, n)
	}
	if strings.Count(info, "state=online") != n {
		return fmt.Errorf("%s: not all of its %d replicas are online", addr, n)
	}
	return nil
}

// roleOf returns the first element of ROLE: master, slave or sentinel.
func roleOf(addr string) (string, error) {
	v, err := call(addr, "ROLE")
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return "", fmt.Errorf("ROLE: %v", v)
	}
	role, _ := a[0].(string)
	return role, nil
}

// fields turns a flat array of names and values, such as SENTINEL MASTER
// returns, into a map.
func fields(v any) map[string]string {
	m := map[string]string{}
	a, _ := v.([]any)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		val, _ := a[i+1].(string)
		m[k] = val
	}
	return m
}
