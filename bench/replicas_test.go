package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/redisstore"
)

var replicasOnly = flag.Bool("replicas", false,
	"TestReplicas: run the replica-acknowledgement scenario alone, sized by -duration, and print its table")

// replicaAckTimeout is the wait's timeout in the scenario: far above the
// replication delay on loopback, so that no write is refused.
const replicaAckTimeout = time.Second

// TestReplicas runs the replica-acknowledgement scenario alone, sized by
// -duration, when given -replicas (TestReport runs it with the others):
//
//	go test -count=1 -run '^TestReplicas$' -timeout 30m . -args -replicas -duration=3s
func TestReplicas(t *testing.T) {
	if !*replicasOnly {
		t.Skip("TestReport runs this scenario; -replicas runs it alone")
	}
	results := replicaScenarios(t, *duration)
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// replicaScenarios measures the guard on a Redis master with one replica
// attached, through middleware.Do (no HTTP), with and without
// redisstore.WithWaitForReplicas(1, 1 s): first executions (a new key per
// call: a claim, which with the option waits for the replica, and a
// completion, whose wait rides in its round trip) and replays (one key,
// completed before: a claim that finds the outcome, which waits for
// nothing either way), at 1 and 32 goroutines. Every row runs in rounds,
// both subjects once a round in alternating order; a row adds up its
// rounds.
func replicaScenarios(t *testing.T, d time.Duration) []Result {
	ctx := t.Context()
	master, replica := testenv.NewRedis(t), testenv.NewRedis(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	if err := rc.SlaveOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	// Maintenance notifications off: see redisstore.WithWaitForReplicas.
	mc := redis.NewClient(&redis.Options{Addr: master.Addr, PoolSize: 64, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = mc.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n, err := mc.Wait(ctx, 1, 100*time.Millisecond).Result(); err == nil && n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not come online")
		}
		time.Sleep(50 * time.Millisecond)
	}

	discard := middleware.WithLogger(slog.New(slog.DiscardHandler))
	type subject struct {
		name  string
		guard *middleware.Guard
	}
	var subjects []subject
	for _, s := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"redisstore", nil},
		{"redisstore, WithWaitForReplicas(1, 1s)", []redisstore.Option{redisstore.WithWaitForReplicas(1, replicaAckTimeout)}},
	} {
		st, err := redisstore.New(mc, append([]redisstore.Option{redisstore.WithKeyPrefix(testenv.Name(t) + ":")}, s.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(st, discard)
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, subject{s.name, g})
	}
	work := func(context.Context) (string, error) { return `{"order":1}`, nil }

	const rounds = 3
	var results []Result
	for _, mode := range []string{"first executions", "replays of one key"} {
		for _, workers := range []int{1, 32} {
			perSubject := make([][]Result, len(subjects))
			for round := range rounds {
				for j := range subjects {
					si := (j + round) % len(subjects)
					s := subjects[si]
					keyPrefix := fmt.Sprint(mode, "-", workers, "-", round, "-", si, "-")
					if mode == "replays of one key" {
						if _, _, err := middleware.Do(ctx, s.guard, keyPrefix+"one", "input", work); err != nil {
							t.Fatal(err)
						}
					}
					r := Run(ctx, workers, d/rounds, func(ctx context.Context, w, i int) error {
						key := keyPrefix + "one"
						if mode == "first executions" {
							key = fmt.Sprint(keyPrefix, w, "-", i)
						}
						_, replayed, err := middleware.Do(ctx, s.guard, key, "input", work)
						if err == nil && replayed != (mode != "first executions") {
							err = fmt.Errorf("replayed %v in mode %q", replayed, mode)
						}
						return err
					})
					perSubject[si] = append(perSubject[si], r)
				}
			}
			for si, s := range subjects {
				r := combine(perSubject[si])
				r.Group, r.Subject, r.Mode = "Redis guard, master with one replica: waiting for its acknowledgement", s.name, mode
				results = append(results, r)
			}
		}
	}
	return results
}
