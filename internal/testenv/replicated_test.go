package testenv

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// writeReplicated sets key to value on the master at addr and waits (WAIT
// 1 1000, on the same connection) until its replica has acknowledged it.
func writeReplicated(t *testing.T, addr, key, value string) {
	t.Helper()
	c, err := dialRESP(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if v, err := c.do("SET", key, value); err != nil || v != "OK" {
		t.Fatalf("SET %s on %s: %v, %v", key, addr, v, err)
	}
	if v, err := c.do("WAIT", "1", "1000"); err != nil || v != int64(1) {
		t.Fatalf("WAIT 1 1000 on %s: %v, %v (want 1)", addr, v, err)
	}
}

func get(t *testing.T, addr, key string) any {
	t.Helper()
	v, err := call(addr, "GET", key)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, addr, err)
	}
	return v
}

// checkReplicaOf checks that ROLE on addr says replica of master.
func checkReplicaOf(t *testing.T, addr, master string) {
	t.Helper()
	v, err := call(addr, "ROLE")
	if err != nil {
		t.Fatalf("ROLE on %s: %v", addr, err)
	}
	a, _ := v.([]any)
	if len(a) < 4 || a[0] != "slave" {
		t.Fatalf("ROLE on %s: %v, want a replica", addr, v)
	}
	host, _ := a[1].(string)
	port, _ := a[2].(int64)
	if got := net.JoinHostPort(host, strconv.FormatInt(port, 10)); got != master {
		t.Fatalf("%s replicates %s, want %s", addr, got, master)
	}
}

func checkMaster(t *testing.T, addr string) {
	t.Helper()
	if role, err := roleOf(addr); err != nil || role != "master" {
		t.Fatalf("ROLE on %s: %q, %v; want master", addr, role, err)
	}
}

func TestSentinelFailover(t *testing.T) {
	t0 := time.Now()
	s := NewSentinel(t)
	t.Logf("NewSentinel returned after %v", time.Since(t0))
	if len(s.SentinelAddrs) != 3 || len(s.DataAddrs) != 2 || s.MasterName == "" {
		t.Fatalf("Sentinel %+v", s)
	}
	first := s.Master(t)
	if first != s.DataAddrs[0] {
		t.Fatalf("master %s, want %s", first, s.DataAddrs[0])
	}
	checkReplicaOf(t, s.DataAddrs[1], first)
	key := Name(t)
	writeReplicated(t, first, key, "one")

	t0 = time.Now()
	r := s.Failover(t)
	t.Logf("Failover 1 returned after %v", time.Since(t0))
	t.Logf("failover 1: %s -> %s, promoted after %v, replica back after %v", r.Killed, r.NewMaster, r.Promoted, r.Rejoined)
	if r.Killed != first || r.NewMaster != s.DataAddrs[1] || s.Master(t) != r.NewMaster {
		t.Fatalf("failover 1: %+v, Sentinels report %s", r, s.Master(t))
	}
	checkMaster(t, r.NewMaster)
	checkReplicaOf(t, first, r.NewMaster)
	if v := get(t, r.NewMaster, key); v != "one" {
		t.Fatalf("after failover 1: %s = %v, want one", key, v)
	}
	writeReplicated(t, r.NewMaster, key, "two")

	t0 = time.Now()
	r2 := s.Failover(t)
	t.Logf("Failover 2 returned after %v", time.Since(t0))
	t.Logf("failover 2: %s -> %s, promoted after %v, replica back after %v", r2.Killed, r2.NewMaster, r2.Promoted, r2.Rejoined)
	if r2.Killed != r.NewMaster || r2.NewMaster != first || s.Master(t) != first {
		t.Fatalf("failover 2: %+v, Sentinels report %s", r2, s.Master(t))
	}
	checkMaster(t, first)
	checkReplicaOf(t, r.NewMaster, first)
	if v := get(t, first, key); v != "two" {
		t.Fatalf("after failover 2: %s = %v, want two", key, v)
	}
}

func TestReplicatedClusterFailover(t *testing.T) {
	t0 := time.Now()
	c := NewReplicatedCluster(t)
	t.Logf("NewReplicatedCluster returned after %v", time.Since(t0))
	testClusterFailover(t, c)
}

// TestReplicatedClusterWithoutCLI creates the cluster with CLUSTER
// commands, as where redis-cli is not installed.
func TestReplicatedClusterWithoutCLI(t *testing.T) {
	c := newReplicatedCluster(t, false)
	if got := c.Masters(t); len(got) != 3 {
		t.Fatalf("masters %v", got)
	}
	r := c.FailoverMasterOf(t, Name(t))
	t.Logf("failover: %s -> %s, promoted after %v, replica back after %v", r.Killed, r.NewMaster, r.Promoted, r.Rejoined)
}

func testClusterFailover(t *testing.T, c *ReplicatedCluster) {
	if len(c.Addrs()) != 6 {
		t.Fatalf("addrs %v", c.Addrs())
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("masters %v", masters)
	}
	key := Name(t)
	first := c.MasterOf(t, key)
	writeReplicated(t, first, key, "one")

	t0 := time.Now()
	r := c.FailoverMasterOf(t, key)
	t.Logf("FailoverMasterOf returned after %v", time.Since(t0))
	t.Logf("failover 1: %s -> %s, promoted after %v, replica back after %v", r.Killed, r.NewMaster, r.Promoted, r.Rejoined)
	if r.Killed != first || r.NewMaster == first || c.MasterOf(t, key) != r.NewMaster {
		t.Fatalf("failover 1: %+v, master of the key %s", r, c.MasterOf(t, key))
	}
	checkMaster(t, r.NewMaster)
	checkReplicaOf(t, first, r.NewMaster)
	if v := get(t, r.NewMaster, key); v != "one" {
		t.Fatalf("after failover 1: %s = %v, want one", key, v)
	}
	if got := c.Masters(t); len(got) != 3 {
		t.Fatalf("masters after failover 1: %v", got)
	}
	writeReplicated(t, r.NewMaster, key, "two")

	t0 = time.Now()
	r2 := c.FailoverMaster(t, r.NewMaster)
	t.Logf("FailoverMaster returned after %v", time.Since(t0))
	t.Logf("failover 2: %s -> %s, promoted after %v, replica back after %v", r2.Killed, r2.NewMaster, r2.Promoted, r2.Rejoined)
	if r2.Killed != r.NewMaster || r2.NewMaster != first || c.MasterOf(t, key) != first {
		t.Fatalf("failover 2: %+v, master of the key %s", r2, c.MasterOf(t, key))
	}
	checkMaster(t, first)
	checkReplicaOf(t, r.NewMaster, first)
	if v := get(t, first, key); v != "two" {
		t.Fatalf("after failover 2: %s = %v, want two", key, v)
	}
}

// TestFailoverWithReplicaLagLosesTheLastWrites: writes the master
// acknowledged while its replica lagged are gone after the failover, and
// one written before is there.
func TestFailoverWithReplicaLagLosesTheLastWrites(t *testing.T) {
	s := NewSentinel(t)
	first := s.Master(t)
	writeReplicated(t, first, "before", "kept")
	stop := make(chan struct{})
	acked := make(chan int, 1)
	go func() {
		n := 0
		defer func() { acked <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := expect(first, "OK", "SET", fmt.Sprint("w", n), "x"); err != nil {
				return // the master is gone
			}
			n++
		}
	}()
	r := s.Failover(t, ReplicaLag(300*time.Millisecond))
	close(stop)
	n := <-acked
	if r.Lag != 300*time.Millisecond {
		t.Fatalf("the failover's lag: %v", r.Lag)
	}
	if v := get(t, r.NewMaster, "before"); v != "kept" {
		t.Fatalf("after the failover: before = %v, want kept", v)
	}
	lost := 0
	for i := range n {
		if get(t, r.NewMaster, fmt.Sprint("w", i)) == nil {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("all %d writes the old master acknowledged are on the new one; want the last ones lost", n)
	}
	t.Logf("%d of %d acknowledged writes lost", lost, n)
}
