package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// BenchmarkStore measures, on one connection: Get of a present record, a
// Claim that replays an outcome (a retry), a Claim refused by a live claim
// (a waiting duplicate), a first execution (Claim of a free key, then
// Complete with a 1 KiB response, durable), Claim then Release, and Put.
// Against the test server (fsync off) writes look cheaper than on a
// durable server; set IDEMKIT_POSTGRES_URL to measure one.
func BenchmarkStore(b *testing.B) {
	srv := testenv.Postgres(b)
	admin := newPool(b, srv.URL, 1)
	s, err := New(newPool(b, srv.URL, 1), table(b, admin))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fp := "sha256:" + string(bytes.Repeat([]byte("ab"), 32))
	body := bytes.Repeat([]byte("x"), 1024)
	c, _, err := s.Claim(ctx, "done", fp, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	c.State, c.Response = store.StateCompleted, body
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		b.Fatal(ok, err)
	}
	if _, _, err := s.Claim(ctx, "busy", fp, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.Run("Get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := s.Get(ctx, "done"); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("ClaimReplay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rec, claimed, err := s.Claim(ctx, "done", fp, time.Hour); err != nil || claimed || rec.State != store.StateCompleted {
				b.Fatal(claimed, err)
			}
		}
	})
	b.Run("ClaimBusy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, claimed, err := s.Claim(ctx, "busy", fp, time.Hour); err != nil || claimed {
				b.Fatal(claimed, err)
			}
		}
	})
	b.Run("ClaimComplete", func(b *testing.B) {
		b.ReportAllocs()
		run, i := time.Now().UnixNano(), 0
		for b.Loop() {
			i++
			c, claimed, err := s.Claim(ctx, fmt.Sprint("first/", run, "/", i), fp, time.Hour)
			if err != nil || !claimed {
				b.Fatal(claimed, err)
			}
			c.State, c.Response = store.StateCompleted, body
			if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("ClaimRelease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, claimed, err := s.Claim(ctx, "cycle", fp, time.Hour)
			if err != nil || !claimed {
				b.Fatal(claimed, err)
			}
			if ok, err := s.Release(ctx, "cycle", c.Fence); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Put", func(b *testing.B) {
		b.ReportAllocs()
		rec := store.Record{Fingerprint: fp, State: store.StateCompleted, Response: body, Fence: 1}
		i := 0
		for b.Loop() {
			i++
			rec.Key = fmt.Sprint("put/", i%1000)
			if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkVsPlain measures, at 16 goroutines on a pool of 16 connections
// against one server, the store's first executions (Claim of a free key,
// then Complete with a 1 KiB response) and replays (Claim of a completed
// key) against the same round trips as plain statements on a table
// created like the store's: INSERT … ON CONFLICT DO NOTHING then UPDATE …
// WHERE key = $1, and SELECT … WHERE key = $1 of the same columns. The
// two loops alternate in 32 rounds, so that a noisy machine slows both
// alike;
// ns/op is the store's, plain-ns/op the plain loop's, and vs-plain the
// store's throughput as a fraction of the plain loop's. Against the test
// server (fsync off) writes look cheaper than on a durable server; set
// IDEMKIT_POSTGRES_URL to measure one.
func BenchmarkVsPlain(b *testing.B) {
	const workers, replayKeys = 16, 64
	srv := testenv.Postgres(b)
	admin := newPool(b, srv.URL, 1)
	opt := table(b, admin)
	pool := newPool(b, srv.URL, workers)
	s, err := New(pool, opt)
	if err != nil {
		b.Fatal(err)
	}
	plain := strings.TrimSuffix(tableOf(s), `"records"`) + `"plain"`
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE TABLE "+plain+" (LIKE "+tableOf(s)+" INCLUDING ALL)"); err != nil {
		b.Fatal(err)
	}
	fp := []byte("sha256:" + string(bytes.Repeat([]byte("ab"), 32)))
	body := bytes.Repeat([]byte("x"), 1024)
	const (
		insertSQL = `INSERT INTO {{t}} (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
VALUES ($1, $2, 1, '', 1, clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp() + interval '2 hours')
ON CONFLICT (key) DO NOTHING`
		updateSQL = `UPDATE {{t}} SET state = 2, response = $2, created_at = clock_timestamp(),
	expires_at = clock_timestamp() + interval '1 hour', keep_until = clock_timestamp() + interval '1 hour' WHERE key = $1`
		selectSQL = `SELECT fingerprint, state, response, fence, created_at, expires_at FROM {{t}} WHERE key = $1`
	)
	plainSQL := func(sql string) string { return strings.ReplaceAll(sql, "{{t}}", plain) }
	replayKey := func(w, i int) string { return fmt.Sprint("replay/", w*replayKeys+i%replayKeys) }
	for w := range workers {
		for i := range replayKeys {
			k := replayKey(w, i)
			c, claimed, err := s.Claim(ctx, k, string(fp), time.Hour)
			if err != nil || !claimed {
				b.Fatal(claimed, err)
			}
			c.State, c.Response = store.StateCompleted, body
			if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if _, err := pool.Exec(ctx, plainSQL(insertSQL), k, fp); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, plainSQL(updateSQL), k, body); err != nil {
				b.Fatal(err)
			}
		}
	}
	// loop runs op n times over the workers and returns how long it took.
	loop := func(b *testing.B, n int, op func(w, i int) error) time.Duration {
		var (
			next  atomic.Int64
			wg    sync.WaitGroup
			errMu sync.Mutex
			first error
		)
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i > n {
						return
					}
					if err := op(w, i); err != nil {
						errMu.Lock()
						first = cmp.Or(first, err)
						errMu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			b.Fatal(first)
		}
		return time.Since(start)
	}
	// Each run of a sub-benchmark (-count runs them again in this call)
	// claims keys of its own.
	run, runs := time.Now().UnixNano(), atomic.Int64{}
	compare := func(b *testing.B, storeOp, plainOp func(w, i int) error) {
		rounds := min(b.N, 32)
		var storeTime, plainTime time.Duration
		b.ResetTimer()
		for r := range rounds {
			n := (b.N + rounds - 1 - r) / rounds
			if r%2 == 1 { // the plain loop first, in every other round
				b.StopTimer()
				plainTime += loop(b, n, plainOp)
				b.StartTimer()
			}
			storeTime += loop(b, n, storeOp)
			if r%2 == 0 {
				b.StopTimer()
				plainTime += loop(b, n, plainOp)
				b.StartTimer()
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(plainTime.Nanoseconds())/float64(b.N), "plain-ns/op")
		b.ReportMetric(plainTime.Seconds()/storeTime.Seconds(), "vs-plain")
	}
	b.Run("FirstExecution", func(b *testing.B) {
		round := fmt.Sprint("first/", run, "/", runs.Add(1), "/")
		var keys atomic.Int64
		compare(b, func(_, _ int) error {
			c, claimed, err := s.Claim(ctx, round+fmt.Sprint(keys.Add(1)), string(fp), time.Hour)
			if err != nil || !claimed {
				return errors.Join(err, fmt.Errorf("claimed %v", claimed))
			}
			c.State, c.Response = store.StateCompleted, body
			if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
				return errors.Join(err, fmt.Errorf("completed %v", ok))
			}
			return nil
		}, func(_, _ int) error {
			k := round + fmt.Sprint(keys.Add(1))
			if _, err := pool.Exec(ctx, plainSQL(insertSQL), k, fp); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, plainSQL(updateSQL), k, body)
			return err
		})
	})
	b.Run("Replay", func(b *testing.B) {
		compare(b, func(w, i int) error {
			rec, claimed, err := s.Claim(ctx, replayKey(w, i), string(fp), time.Hour)
			if err != nil || claimed || rec.State != store.StateCompleted {
				return errors.Join(err, fmt.Errorf("claimed %v, state %v", claimed, rec.State))
			}
			return nil
		}, func(w, i int) error {
			var r row
			return pool.QueryRow(ctx, plainSQL(selectSQL), replayKey(w, i)).Scan(r.dest()...)
		})
	})
}
