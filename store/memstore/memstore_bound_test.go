package memstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// The bound tests drive the guard with what an HTTP API sends it: a key
// shaped like a UUID, a fingerprint of the request and a JSON response of
// 194 bytes.

// boundKeys is how many distinct keys the churn test sends through the
// guard (a tenth of them with -short).
const boundKeys = 500_000

// heapPerKey bounds the heap a key holds in the store beyond what it
// counts against WithMaxBytes (its key, fingerprint and response, and a
// fixed overhead): the map slot and Go's size-class rounding. Measured: 50
// to 160 bytes, whatever the size of the response. So a store's live heap
// stays under WithMaxBytes + WithMaxEntries × heapPerKey.
const heapPerKey = 200

// liveBound is the most live heap a store with these limits holds.
func liveBound(maxEntries, maxBytes int) uint64 {
	return uint64(maxBytes + maxEntries*heapPerKey)
}

// churnHeap is how many times the live heap the heap in use may reach
// while records expire and new ones arrive: a record still live keeps the
// span it shares with the garbage of the requests around it in use.
// Measured: about 2.2.
const churnHeap = 3

// heapSlack is the heap the runtime and the test itself may add to a
// measurement besides the store's records.
const heapSlack = 4 << 20

// keyOf returns the i-th idempotency key: 36 bytes, shaped like a UUID.
func keyOf(i int) string {
	b := []byte("00000000-4000-8000-0000-000000000000")
	putDigits(b[:8], uint64(i), 16)
	putDigits(b[24:], uint64(i), 16)
	return string(b)
}

// fingerprintOf returns the fingerprint of the i-th request.
func fingerprintOf(i int) fingerprint.Fingerprint {
	return fingerprint.New("json-v2", sha256.Sum256([]byte(keyOf(i))))
}

// response is the template of the responses: 194 bytes.
const response = `{"id":"ord_000000000000","status":"created","amount":{"value":"129.99","currency":"EUR"},` +
	`"customer":"cus_0000000000","items":[{"sku":"BK-0042","quantity":1}],"created_at":"2026-01-02T03:04:05Z"}`

// The places of the numbers in response.
var (
	responseOrder    = strings.Index(response, "ord_") + len("ord_")
	responseCustomer = strings.Index(response, "cus_") + len("cus_")
)

// responseOf returns the i-th response: always the same length.
func responseOf(i int) []byte {
	b := []byte(response)
	putDigits(b[responseOrder:responseOrder+12], uint64(i), 10)
	putDigits(b[responseCustomer:responseCustomer+10], uint64(i), 10)
	return b
}

// putDigits writes v in base into dst, zero-padded (dst holds zeros),
// dropping the digits that do not fit.
func putDigits(dst []byte, v, base uint64) {
	for k := len(dst) - 1; k >= 0 && v > 0; k-- {
		dst[k] = "0123456789abcdef"[v%base]
		v /= base
	}
}

// newGuard returns a guard over s. A guard keeps its store reachable until
// its lease renewal timer has fired, up to a third of its lease TTL after
// its last call; guarded counts the stores of guards not yet collected, so
// that a heap measurement can wait for them (settle).
func newGuard(t *testing.T, s *memstore.Store, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	guarded.Add(1)
	runtime.AddCleanup(s, func(struct{}) { guarded.Add(-1) }, struct{}{})
	return g
}

// guarded is the number of stores given to newGuard and not yet
// collected.
var guarded atomic.Int64

// settle waits until the stores of the earlier tests' guards have been
// collected, so that they do not go during a measurement of the heap; it
// gives up after the renewal timer of a guard with the default lease TTL
// has fired, the longest the tests here keep one.
func settle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); guarded.Load() > 0; time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		if time.Now().After(deadline) {
			t.Logf("%d stores of earlier tests are still held; measuring anyway", guarded.Load())
			return
		}
	}
}

// heap collects garbage and returns the heap in use (the spans that hold
// any object) and the bytes of the objects it holds. It collects twice:
// what pools hold survives one collection.
func heap() (inUse, live uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.HeapAlloc
}

// mb formats n bytes in megabytes.
func mb(n uint64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// growth returns after - before, or 0 when the heap shrank.
func growth(before, after uint64) uint64 {
	if after < before {
		return 0
	}
	return after - before
}

// limits checks that s holds no more than maxEntries keys and maxBytes
// bytes, and reports what it holds.
func limits(t *testing.T, s *memstore.Store, maxEntries, maxBytes int) (entries, size int, ok bool) {
	t.Helper()
	entries, size = memstore.Usage(s)
	if entries > maxEntries || size > maxBytes {
		t.Errorf("the store holds %d keys and %d bytes; its limits are %d keys and %d bytes", entries, size, maxEntries, maxBytes)
		return entries, size, false
	}
	return entries, size, true
}

// raise raises *peak to v if v is greater.
func raise(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// TestBoundedUnderChurn sends 500,000 distinct keys (50,000 with -short)
// through the guard while the store's clock moves on: records expire and
// are swept, so the store stays within its limits (it works at its key
// limit and sweeps at once when full) and every request succeeds. A record
// is never gone before its TTL: the replays of recent keys all replay. The
// live heap stays under the bound its limits set (WithMaxBytes plus
// heapPerKey a key), and the heap in use under churnHeap times that.
func TestBoundedUnderChurn(t *testing.T) {
	const (
		maxEntries = 12_000
		maxBytes   = maxEntries * 512
		recordTTL  = 10 * time.Second
		step       = time.Millisecond // the clock moves 1 ms per request: about 10,000 records are live at once
		workers    = 2
		lag        = 2_000 * workers // replays go to the key sent this many requests earlier (about 4 s)
		replayRate = 50              // one replay per this many requests of a worker
		checkEvery = 50_000          // heap checkpoints
	)
	keys := boundKeys
	if testing.Short() {
		keys /= 10
	}
	if n := len(responseOf(keys)); n < 100 || n > 200 {
		t.Fatalf("a response of %d bytes; these tests want a small one (100 to 200 bytes)", n)
	}
	settle(t)
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxEntries(maxEntries), memstore.WithMaxBytes(maxBytes))
	g := newGuard(t, s, middleware.WithRecordTTL(recordTTL))

	var (
		ran, replays, renewed  atomic.Int64
		peakEntries, peakBytes atomic.Int64
		peakInUse, peakLive    uint64
		sent                   = make([]int64, keys) // the store's clock (Unix ns) before each key was sent
	)
	liveMax := liveBound(maxEntries, maxBytes) + heapSlack
	inUseMax := churnHeap*liveBound(maxEntries, maxBytes) + heapSlack
	inUse0, live0 := heap()
	rss0, start := testenv.RSS(), time.Now()
	since := func(j int) time.Duration { return clock.Now().Sub(time.Unix(0, sent[j])) }
	// send sends key i, and now and then replays an earlier key of the
	// same worker; it reports whether all went well.
	send := func(i int) bool {
		sent[i] = clock.Now().UnixNano()
		out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), func(context.Context) (middleware.Result, error) {
			ran.Add(1)
			return middleware.Result{Value: responseOf(i)}, nil
		})
		if err != nil || out.Replayed || !out.Recorded {
			t.Errorf("key %d: replayed %v, recorded %v, %v; want it executed and recorded", i, out.Replayed, out.Recorded, err)
			return false
		}
		clock.Advance(step)
		held, size, ok := limits(t, s, maxEntries, maxBytes)
		if !ok {
			return false
		}
		raise(&peakEntries, int64(held))
		raise(&peakBytes, int64(size))
		j := i - lag
		if j < 0 || (i/workers)%replayRate != 0 {
			return true
		}
		replays.Add(1)
		out, err = g.Execute(ctx, keyOf(j), fingerprintOf(j), func(context.Context) (middleware.Result, error) {
			ran.Add(1)
			return middleware.Result{Value: responseOf(j)}, nil
		})
		switch {
		case err != nil:
			t.Errorf("replay of key %d: %v", j, err)
			return false
		case !out.Replayed && since(j) < recordTTL:
			t.Errorf("key %d ran again %v after it was sent; its record was gone before its TTL (%v)", j, since(j), recordTTL)
			return false
		case !out.Replayed:
			renewed.Add(1) // its TTL had passed (a worker fell far behind the other)
		case !bytes.Equal(out.Value, responseOf(j)):
			t.Errorf("replay of key %d: %q; want %q", j, out.Value, responseOf(j))
			return false
		}
		return true
	}
	// The keys go in rounds; between two, nothing runs while the heap is
	// measured.
	for round := 0; round < keys && !t.Failed(); round += checkEvery {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := round + w; i < min(round+checkEvery, keys) && send(i); i += workers {
				}
			}()
		}
		wg.Wait()
		inUse, live := heap()
		peakInUse, peakLive = max(peakInUse, inUse), max(peakLive, live)
		if growth(inUse0, inUse) > inUseMax || growth(live0, live) > liveMax {
			t.Fatalf("after %d keys the heap in use grew by %s and the live heap by %s; want at most %s and %s",
				round+checkEvery, mb(growth(inUse0, inUse)), mb(growth(live0, live)), mb(inUseMax), mb(liveMax))
		}
	}
	elapsed := time.Since(start)
	rss1 := testenv.RSS()
	peak := peakInUse
	held, size, _ := limits(t, s, maxEntries, maxBytes)
	t.Logf("%d keys (and %d replays) in %v; limits %d keys, %d bytes; held at most %d keys, %d bytes; at the end %d keys, %d bytes",
		keys, replays.Load(), elapsed.Round(time.Millisecond), maxEntries, maxBytes, peakEntries.Load(), peakBytes.Load(), held, size)
	t.Logf("live heap: %s before, peak growth %s (bound %s: %d bytes + %d keys × %d B + %s); heap in use: %s before, peak growth %s (bound %s: %d × that + %s); RSS %s → %s",
		mb(live0), mb(growth(live0, peakLive)), mb(liveMax), maxBytes, maxEntries, heapPerKey, mb(heapSlack),
		mb(inUse0), mb(growth(inUse0, peak)), mb(inUseMax), churnHeap, mb(heapSlack), mb(rss0), mb(rss1))
	if t.Failed() {
		return
	}
	if got, want := ran.Load(), int64(keys)+renewed.Load(); got != want {
		t.Fatalf("the work ran %d times; want %d: once per key, never on a replay", got, want)
	}
	if peakEntries.Load() < maxEntries*9/10 {
		t.Fatalf("the store held at most %d keys; the test wants it working at its limit (%d)", peakEntries.Load(), maxEntries)
	}
	// The first keys' records are long gone: the key runs again.
	out, err := g.Execute(ctx, keyOf(0), fingerprintOf(0), func(context.Context) (middleware.Result, error) {
		return middleware.Result{Value: responseOf(0)}, nil
	})
	if err != nil || out.Replayed {
		t.Fatalf("key 0 long after its TTL: replayed %v, %v; want it run again", out.Replayed, err)
	}
	runtime.KeepAlive(s)
}

// refusedFull checks that err is the guard's refusal of a claim by a full
// store: unavailable (HTTP 503), RateLimited underneath, worth a retry.
func refusedFull(t *testing.T, what string, err error) bool {
	t.Helper()
	var ue *middleware.UnavailableError
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.As(err, &ue) || ue.Op != "claim" ||
		idemkit.CodeOf(err) != idemkit.CodeRateLimited || !errors.Is(err, idemkit.ErrRateLimited) || !idemkit.CodeOf(err).Transient() {
		t.Errorf("%s: %v; want the claim refused as unavailable (RateLimited: the store is full)", what, err)
		return false
	}
	return true
}

// TestFullStoreRefusesNewKeys fills the store to its key limit, with some
// claims still running, and sends new keys at it: each is refused (the
// guard's ErrUnavailable, RateLimited underneath, never running the work)
// and changes nothing. The running claims complete, every record replays,
// and once the records' TTL has passed the store takes new keys again.
func TestFullStoreRefusesNewKeys(t *testing.T) {
	const (
		maxEntries = 20_000
		held       = 16     // claims whose work still runs when the store fills
		refused    = 30_000 // new keys sent at the full store
		recordTTL  = 2 * time.Hour
		leaseTTL   = 3 * time.Second // renewed every second while the work runs
	)
	settle(t)
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxEntries(maxEntries))
	g := newGuard(t, s, middleware.WithRecordTTL(recordTTL), middleware.WithLeaseTTL(leaseTTL))
	var ran atomic.Int64
	run := func(i int) middleware.Func {
		return func(context.Context) (middleware.Result, error) {
			ran.Add(1)
			return middleware.Result{Value: responseOf(i)}, nil
		}
	}
	inUse0, live0 := heap()
	rss0 := testenv.RSS()

	// Claims whose work is still running.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	started := make(chan int, held)
	outs := make([]middleware.Outcome, held)
	errs := make([]error, held)
	var wg sync.WaitGroup
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = g.Execute(ctx, keyOf(i), fingerprintOf(i), func(ctx context.Context) (middleware.Result, error) {
				started <- i
				<-release
				return run(i)(ctx)
			})
		}()
	}
	for range held {
		<-started
	}
	// The rest of the store fills with completed records.
	for i := held; i < maxEntries; i++ {
		out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
		if err != nil || !out.Recorded {
			t.Fatalf("key %d: recorded %v, %v", i, out.Recorded, err)
		}
	}
	entries, full, _ := limits(t, s, maxEntries, 1<<30)
	if entries != maxEntries {
		t.Fatalf("%d keys held; want the store full (%d)", entries, maxEntries)
	}
	inUse, live := heap()
	rssFull := testenv.RSS()
	perKey := growth(live0, live) / maxEntries
	t.Logf("a full store of %d keys (%d running claims, the rest records of %d-byte responses) counts %d bytes (%d a key); "+
		"live heap +%s (%d B a key: %d B beyond what it counts), heap in use %s → %s; RSS %s → %s",
		maxEntries, held, len(responseOf(0)), full, full/maxEntries, mb(growth(live0, live)), perKey, int(perKey)-full/maxEntries,
		mb(inUse0), mb(inUse), mb(rss0), mb(rssFull))
	if bound := liveBound(maxEntries, full) + heapSlack; growth(live0, live) > bound {
		t.Errorf("the live heap grew by %s; want at most %s (%d bytes counted + %d keys × %d B + %s)",
			mb(growth(live0, live)), mb(bound), full, maxEntries, heapPerKey, mb(heapSlack))
	}
	if bound := churnHeap*liveBound(maxEntries, full) + heapSlack; growth(inUse0, inUse) > bound {
		t.Errorf("the heap in use grew by %s; want at most %s", mb(growth(inUse0, inUse)), mb(bound))
	}

	// New keys are refused, and change nothing.
	sendRefused := func(from, n int) {
		t.Helper()
		keys, size := memstore.Usage(s)
		for i := from; i < from+n; i++ {
			_, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
			if !refusedFull(t, fmt.Sprint("key ", i), err) {
				t.FailNow()
			}
			if e, b := memstore.Usage(s); e != keys || b != size {
				t.Fatalf("a refused claim changed the store: %d keys, %d bytes; want %d, %d", e, b, keys, size)
			}
		}
	}
	start := time.Now()
	sendRefused(maxEntries, refused)
	t.Logf("%d new keys refused in %v", refused, time.Since(start).Round(time.Millisecond))
	// Within the claims' lease and the records' TTL the store is still
	// full: nothing may go.
	clock.Advance(leaseTTL / 2)
	sendRefused(maxEntries+refused, 100)
	if n := ran.Load(); n != maxEntries-held {
		t.Fatalf("the work ran %d times; want %d (never for a refused key)", n, maxEntries-held)
	}

	// The running claims complete: a full store still takes their
	// outcomes.
	free()
	wg.Wait()
	for i := range held {
		if errs[i] != nil || outs[i].Replayed || !outs[i].Recorded {
			t.Fatalf("running claim %d: replayed %v, recorded %v, %v; want its outcome recorded", i, outs[i].Replayed, outs[i].Recorded, errs[i])
		}
	}
	// Every record replays, without running the work.
	for i := range maxEntries {
		out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
		if err != nil || !out.Replayed || !bytes.Equal(out.Value, responseOf(i)) {
			t.Fatalf("key %d: replayed %v, %q, %v; want its record", i, out.Replayed, out.Value, err)
		}
	}
	if n := ran.Load(); n != maxEntries {
		t.Fatalf("the work ran %d times; want %d", n, maxEntries)
	}

	// Once the first records' TTL has passed, a full store sweeps them at
	// once and takes as many new keys; the records completed later (the
	// running claims') stay and still replay.
	clock.Advance(recordTTL - leaseTTL/2)
	next := maxEntries + refused + 100
	for i := next; i < next+maxEntries-held; i++ {
		out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
		if err != nil || !out.Recorded {
			t.Fatalf("key %d after the TTL: recorded %v, %v", i, out.Recorded, err)
		}
	}
	for i := range held {
		out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
		if err != nil || !out.Replayed || !bytes.Equal(out.Value, responseOf(i)) {
			t.Fatalf("key %d, completed later: replayed %v, %v; want its record", i, out.Replayed, err)
		}
	}
	sendRefused(next+maxEntries-held, 1)
	runtime.KeepAlive(s)
}

// TestFullStoreRefusesNewKeysByBytes is TestFullStoreRefusesNewKeys with
// the byte limit the one reached.
func TestFullStoreRefusesNewKeysByBytes(t *testing.T) {
	const (
		records   = 5_000
		recordTTL = time.Hour
	)
	ctx := context.Background()
	// What one record counts against the byte limit.
	probe := memstore.New()
	if _, err := newGuard(t, probe).Execute(ctx, keyOf(0), fingerprintOf(0), func(context.Context) (middleware.Result, error) {
		return middleware.Result{Value: responseOf(0)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, size := memstore.Usage(probe)
	maxBytes := records * size

	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxEntries(0), memstore.WithMaxBytes(maxBytes))
	g := newGuard(t, s, middleware.WithRecordTTL(recordTTL))
	var ran atomic.Int64
	run := func(i int) middleware.Func {
		return func(context.Context) (middleware.Result, error) {
			ran.Add(1)
			return middleware.Result{Value: responseOf(i)}, nil
		}
	}
	for i := range records {
		if out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i)); err != nil || !out.Recorded {
			t.Fatalf("key %d: recorded %v, %v", i, out.Recorded, err)
		}
	}
	if e, b, _ := limits(t, s, records, maxBytes); e != records || b != maxBytes {
		t.Fatalf("%d keys, %d bytes held; want the store full (%d keys, %d bytes)", e, b, records, maxBytes)
	}
	for i := records; i < 2*records; i++ {
		_, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
		if !refusedFull(t, fmt.Sprint("key ", i), err) {
			t.FailNow()
		}
	}
	clock.Advance(recordTTL - time.Millisecond)
	for i := range records {
		out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i))
		if err != nil || !out.Replayed || !bytes.Equal(out.Value, responseOf(i)) {
			t.Fatalf("key %d: replayed %v, %v; want its record", i, out.Replayed, err)
		}
	}
	if n := ran.Load(); n != records {
		t.Fatalf("the work ran %d times; want %d", n, records)
	}
	clock.Advance(time.Millisecond)
	for i := 2 * records; i < 3*records; i++ {
		if out, err := g.Execute(ctx, keyOf(i), fingerprintOf(i), run(i)); err != nil || !out.Recorded {
			t.Fatalf("key %d after the TTL: recorded %v, %v", i, out.Recorded, err)
		}
	}
	limits(t, s, records, maxBytes)
}
