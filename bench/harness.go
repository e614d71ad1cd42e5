package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one scenario's measurement.
type Result struct {
	Group    string        // the table it belongs to ("redis", "postgres", "http")
	Subject  string        // the library or configuration measured
	Mode     string        // "distinct keys", "one hot key", ...
	Workers  int           // concurrent goroutines
	Ops      int           // completed cycles
	Cycles   int           // every cycle run, the warm-up's and the failed ones too
	Errors   int           // cycles that failed
	Elapsed  time.Duration // wall time of the run
	P50, P99 time.Duration // per-cycle latency
}

// OpsPerSec is the throughput.
func (r Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Cycle is one unit of work: an acquire+release, one HTTP request. worker
// is the goroutine's index and i its cycle count.
type Cycle func(ctx context.Context, worker, i int) error

// Run runs cycle on workers goroutines for d (after a short warm-up that is
// not measured) and measures throughput and per-cycle latency.
func Run(ctx context.Context, workers int, d time.Duration, cycle Cycle) Result {
	warm := min(d/10, 200*time.Millisecond)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		ops, errs atomic.Int64
		cycles    atomic.Int64
		measuring atomic.Bool
		stop      atomic.Bool
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
				start := time.Now()
				err := cycle(ctx, w, i)
				cycles.Add(1)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				ops.Add(1)
				local = append(local, time.Since(start))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}
	time.Sleep(warm)
	measuring.Store(true)
	begin := time.Now()
	time.Sleep(d)
	stop.Store(true)
	elapsed := time.Since(begin)
	wg.Wait()
	slices.Sort(latencies)
	return Result{Workers: workers, Ops: int(ops.Load()), Cycles: int(cycles.Load()), Errors: int(errs.Load()), Elapsed: elapsed,
		P50: percentile(latencies, 0.50), P99: percentile(latencies, 0.99)}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// WriteMarkdown writes results as one markdown table per group, in the
// order the groups first appear, with each row's throughput also given as a
// ratio to the first row of the same mode and worker count (the baseline).
func WriteMarkdown(w io.Writer, results []Result) error {
	var groups []string
	byGroup := map[string][]Result{}
	for _, r := range results {
		if _, ok := byGroup[r.Group]; !ok {
			groups = append(groups, r.Group)
		}
		byGroup[r.Group] = append(byGroup[r.Group], r)
	}
	for _, g := range groups {
		if _, err := fmt.Fprintf(w, "\n### %s\n\n| subject | mode | workers | ops/s | vs first | p50 | p99 | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n", g); err != nil {
			return err
		}
		base := map[string]float64{}
		for _, r := range byGroup[g] {
			k := fmt.Sprint(r.Mode, "/", r.Workers)
			if _, ok := base[k]; !ok {
				base[k] = r.OpsPerSec()
			}
			ratio := "—"
			if b := base[k]; b > 0 {
				ratio = fmt.Sprintf("%.2f×", r.OpsPerSec()/b)
			}
			if _, err := fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s | %s | %s | %d |\n",
				r.Subject, r.Mode, r.Workers, r.OpsPerSec(), ratio, round(r.P50), round(r.P99), r.Errors); err != nil {
				return err
			}
		}
	}
	return nil
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
