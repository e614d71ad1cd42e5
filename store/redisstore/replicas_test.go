package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestWaitForReplicasValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opt    redisstore.Option
	}{
		{"no replicas", c, redisstore.WithWaitForReplicas(0, time.Second)},
		{"negative replicas", c, redisstore.WithWaitForReplicas(-1, time.Second)},
		{"no timeout", c, redisstore.WithWaitForReplicas(1, 0)},
		{"timeout below a millisecond", c, redisstore.WithWaitForReplicas(1, time.Microsecond)},
		{"a ring", ring, redisstore.WithWaitForReplicas(1, time.Second)},
	} {
		if _, err := redisstore.New(tc.client, tc.opt); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: New = %v; want InvalidArgument", tc.name, err)
		}
	}
	if _, err := redisstore.New(c, redisstore.WithWaitForReplicas(1, time.Second)); err != nil {
		t.Errorf("New with a valid wait: %v", err)
	}
}

// replicated starts a master with one replica attached and returns a
// client of each.
func replicated(t *testing.T) (master, replica *redis.Client) {
	t.Helper()
	m, r := testenv.NewRedis(t), testenv.NewRedis(t)
	host, port, _ := net.SplitHostPort(m.Addr)
	master, replica = nodeClient(t, m.Addr), nodeClient(t, r.Addr)
	if err := replica.SlaveOf(t.Context(), host, port).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := master.Wait(t.Context(), 1, 100*time.Millisecond).Result()
		if err == nil && n >= 1 {
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not come online: %v, %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWaitForReplicasAcknowledged: with a replica attached, a claim, an
// extension and a completion are on the replica as soon as they return.
func TestWaitForReplicasAcknowledged(t *testing.T) {
	ctx := t.Context()
	master, replica := replicated(t)
	s := newStore(t, master, redisstore.WithWaitForReplicas(1, 5*time.Second))
	reader := newStore(t, replica) // reads the replica's copy with the store's own script
	rec, ok, err := s.Claim(ctx, "k", "fp", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Claim: %v, %v", ok, err)
	}
	if got, found, err := reader.Get(ctx, "k"); err != nil || !found || got.State != store.StateClaimed || got.Fence != rec.Fence {
		t.Fatalf("the replica after the claim: %+v, %v, %v; want the claim", got, found, err)
	}
	if _, ok, err := s.Extend(ctx, "k", rec.Fence, 2*time.Minute); err != nil || !ok {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	if got, _, _ := reader.Get(ctx, "k"); !got.ExpiresAt.After(rec.ExpiresAt.Add(30 * time.Second)) {
		t.Fatalf("the replica's lease ends at %v; want the extension's end, past %v", got.ExpiresAt, rec.ExpiresAt)
	}
	rec.State, rec.Response = store.StateCompleted, []byte("the answer")
	if ok, err := s.Complete(ctx, rec, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	if got, found, err := reader.Get(ctx, "k"); err != nil || !found || got.State != store.StateCompleted || string(got.Response) != "the answer" {
		t.Fatalf("the replica after the completion: %+v, %v, %v; want the outcome", got, found, err)
	}
	// A replay waits for nothing and gets the outcome.
	if got, ok, err := s.Claim(ctx, "k", "fp", time.Minute); err != nil || ok || got.State != store.StateCompleted {
		t.Fatalf("Claim of a completed key: %+v, %v, %v; want the outcome", got, ok, err)
	}
}

// TestWaitForReplicasNotAcknowledged: on a master without a replica, a
// claim fails closed with ServiceUnavailable and leaves the key free; a
// completion fails too, with its outcome written on the master, and a
// retry of it, which finds the outcome there, waits again.
func TestWaitForReplicasNotAcknowledged(t *testing.T) {
	ctx := t.Context()
	c := nodeClient(t, testenv.NewRedis(t).Addr)
	s := newStore(t, c, redisstore.WithWaitForReplicas(1, 20*time.Millisecond))
	plain := newStore(t, c)

	if _, ok, err := s.Claim(ctx, "k", "fp", time.Minute); ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("Claim without a replica: %v, %v; want ServiceUnavailable", ok, err)
	}
	if _, found, err := plain.Get(ctx, "k"); err != nil || found {
		t.Fatalf("the key after the refused claim: %v, %v; want nothing", found, err)
	}
	rec, ok, err := plain.Claim(ctx, "k", "fp", time.Minute)
	if err != nil || !ok {
		t.Fatalf("a claim after the refused one: %v, %v; want the key free", ok, err)
	}

	rec.State, rec.Response = store.StateCompleted, []byte("the answer")
	for attempt := 1; attempt <= 2; attempt++ {
		if ok, err := s.Complete(ctx, rec, time.Hour); ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
			t.Fatalf("Complete attempt %d without a replica: %v, %v; want ServiceUnavailable", attempt, ok, err)
		}
	}
	if got, found, err := plain.Get(ctx, "k"); err != nil || !found || got.State != store.StateCompleted {
		t.Fatalf("the master after the unacknowledged completion: %+v, %v, %v; want the outcome", got, found, err)
	}
}

// TestWaitForReplicasOnCluster: the wait runs on the connection to the
// master of the record's slot (the shared cluster has no replicas:
// every claim is refused and leaves its key free).
func TestWaitForReplicasOnCluster(t *testing.T) {
	c := clusterClient(t)
	s := newStore(t, c, redisstore.WithWaitForReplicas(1, 20*time.Millisecond))
	plain := newStore(t, c)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if _, ok, err := s.Claim(t.Context(), k, "fp", time.Minute); ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
			t.Fatalf("Claim of %q on a cluster without replicas: %v, %v; want ServiceUnavailable", k, ok, err)
		}
		if _, found, err := plain.Get(t.Context(), k); err != nil || found {
			t.Fatalf("%q after the refused claim: %v, %v; want nothing", k, found, err)
		}
	}
}

// TestWaitForReplicasGuard: through the guard, work whose claim no
// replica acknowledged never runs, and the caller gets an unavailable
// error; with a replica, it runs once and replays.
func TestWaitForReplicasGuard(t *testing.T) {
	ctx := t.Context()
	lonely := newStore(t, nodeClient(t, testenv.NewRedis(t).Addr), redisstore.WithWaitForReplicas(1, 20*time.Millisecond))
	g, err := middleware.New(lonely)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	work := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("done"), nil }
	_, _, err = middleware.Do(ctx, g, "k", "input", work)
	var unavailable *middleware.UnavailableError
	if !errors.As(err, &unavailable) || runs.Load() != 0 {
		t.Fatalf("Do without a replica: %v, %d runs; want an UnavailableError and no run", err, runs.Load())
	}

	master, _ := replicated(t)
	g, err = middleware.New(newStore(t, master, redisstore.WithWaitForReplicas(1, 5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		got, replayed, err := middleware.Do(ctx, g, "k", "input", work)
		if err != nil || string(got) != "done" || replayed != (i > 0) {
			t.Fatalf("Do %d with a replica: %q, replayed %v, %v", i, got, replayed, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the work ran %d times; want once", runs.Load())
	}
}

// TestWaitForAOF: WAITAOF needs Redis 7.2. On a server that has it, a
// claim, an extension and a completion count once the master's AOF has
// them; on an older one (the command is unknown) the claim fails and is
// given back, so the work never runs on it.
func TestWaitForAOF(t *testing.T) {
	ctx := t.Context()
	c := nodeClient(t, testenv.NewRedis(t).Addr)
	s := newStore(t, c, redisstore.WithWaitForAOF(true, 0, time.Second))
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := s.Claim(ctx, "k", "fp", time.Minute)
	if !supportsWaitAOF(info) {
		if err == nil || ok {
			t.Fatalf("Claim with WAITAOF on a server without it: %+v, %v, %v; want an error", rec, ok, err)
		}
		if got, found, err := s.Get(ctx, "k"); err != nil || found {
			t.Fatalf("the claim was not given back: %+v, %v, %v", got, found, err)
		}
		return
	}
	if err != nil || !ok {
		t.Fatalf("Claim with WAITAOF: %v, %v", ok, err)
	}
	if _, ok, err := s.Extend(ctx, "k", rec.Fence, 2*time.Minute); err != nil || !ok {
		t.Fatalf("Extend with WAITAOF: %v, %v", ok, err)
	}
	rec.State = store.StateCompleted
	if ok, err := s.Complete(ctx, rec, time.Minute); err != nil || !ok {
		t.Fatalf("Complete with WAITAOF: %v, %v", ok, err)
	}
}

func supportsWaitAOF(info string) bool {
	var major, minor int
	for line := range strings.SplitSeq(info, "\n") {
		if _, err := fmt.Sscanf(line, "redis_version:%d.%d", &major, &minor); err == nil {
			return major > 7 || major == 7 && minor >= 2
		}
	}
	return false
}
