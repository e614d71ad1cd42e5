package redislock_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
)

// BenchmarkCycle measures acquire + release (ReleaseKey: the path lock.Do
// takes) on a single node and on a cluster, at 1 and 32 goroutines, on
// distinct keys and on one hot key. On the hot key most attempts are
// refused (contention): ns/op there is the cost of an attempt, and
// cycles/s counts the acquires that won.
func BenchmarkCycle(b *testing.B) {
	for _, kind := range benchKinds {
		for _, par := range []int{1, 32} {
			for _, hot := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/goroutines=%d/hot=%v", kind, par, hot), func(b *testing.B) {
					l, err := redislock.New(benchClient(b, kind), redislock.WithKeyPrefix(testenv.Name(b)))
					if err != nil {
						b.Fatal(err)
					}
					var seq, won atomic.Int64
					parallel(b, par, func() {
						key := "hot"
						if !hot {
							key = fmt.Sprint("k", seq.Add(1))
						}
						lease, ok, err := l.Acquire(b.Context(), key, 10*time.Second)
						if err != nil {
							b.Error(err)
							return
						}
						if !ok {
							return
						}
						won.Add(1)
						if _, err := l.ReleaseKey(b.Context(), lease.Key, lease.ID); err != nil {
							b.Error(err)
						}
					})
					b.ReportMetric(float64(won.Load())/b.Elapsed().Seconds(), "cycles/s")
				})
			}
		}
	}
}
