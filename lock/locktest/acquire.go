package locktest

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

func init() {
	register(
		testCase{"SG01_AcquireFreeKey", testAcquireFree},
		testCase{"SG02_SecondAcquireIsContention", testContention},
		testCase{"SG03_DifferentKeysIndependent", testDifferentKeys},
		testCase{"SG04_ConcurrentAcquireOneWinner", testConcurrentOneWinner},
		testCase{"SG05_FirstFenceIsOne", testFirstFence},
		testCase{"SG06_FencesStrictlyIncrease", testFencesIncrease},
		testCase{"SG07_ContentionConsumesNoFence", testContentionNoFence},
		testCase{"SG08_FenceCountersIndependent", testFencesIndependent},
		testCase{"SG09_FenceSurvivesReleaseExpiryCleanup", testFenceSurvives},
		testCase{"SG10_FenceSurvivesRestart", testFenceSurvivesRestart},
		testCase{"SG11_InvalidAcquireArguments", testInvalidAcquire},
		testCase{"SG12_KeyLengthBoundary", testKeyLength},
		testCase{"SG13_NormalisedKeysAddressOneLock", testNFC},
		testCase{"GO50_FenceOverflowIsAtomic", testFenceOverflow},
		testCase{"SG36_FenceWarningWithoutRawKey", testFenceWarning},
		testCase{"GO51_UserKeysNeverAddressInternalRecords", testInternalKeys},
		testCase{"GO64_AcquiredAtMonotoneWithFence", testAcquiredAtMonotone},
		testCase{"ExactlyOneHolderAtAnyInstant", testOneHolder},
	)
}

func testAcquireFree(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	ttl := 7 * time.Second
	before := time.Now()
	lease := acquire(t, e, k, ttl)
	if !idPattern.MatchString(lease.ID) {
		t.Fatalf("lock id %q is not 22 base64url characters", lease.ID)
	}
	if err := lock.ValidateID(lease.ID); err != nil {
		t.Fatalf("lock id fails ValidateID: %v", err)
	}
	if got := lease.Fence.String(); len(got) != lock.FenceDigits {
		t.Fatalf("fence %q is not %d digits", got, lock.FenceDigits)
	}
	if lease.Key != k {
		t.Fatalf("lease key %q; want %q", lease.Key, k)
	}
	if got := lease.ExpiresAt.Sub(lease.AcquiredAt); got < ttl-time.Millisecond || got > ttl+time.Millisecond {
		t.Fatalf("ExpiresAt − AcquiredAt = %v; want the TTL %v", got, ttl)
	}
	if !e.fake() && !lease.ExpiresAt.After(before) {
		t.Fatalf("ExpiresAt %v is not after the time of the call %v", lease.ExpiresAt, before)
	}
	if !isLocked(t, e, k) {
		t.Fatal("IsLocked = false right after Acquire")
	}
}

func testContention(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	before, ok := lookupKey(t, e, k)
	if !ok {
		t.Fatal("LookupKey found nothing for a held key")
	}
	for range 3 {
		refused(t, e, k)
	}
	after, ok := lookupKey(t, e, k)
	if !ok {
		t.Fatal("the holder's lock vanished after contended acquires")
	}
	sameInfo(t, "contended acquire", before, after)
	if out := release(t, e, lease.ID); !out.OK {
		t.Fatalf("the holder could not release after contention: %+v", out)
	}
}

func testDifferentKeys(t *testing.T, s *suite) {
	e := s.env(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := e.Locker.Acquire(t.Context(), key(t, string(rune('a'+i))), longTTL)
			if err != nil || !ok {
				errs <- "acquire of a distinct key failed"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Fatal(msg)
	}
}

func testConcurrentOneWinner(t *testing.T, s *suite) {
	e := s.env(t)
	const contenders = 24
	for round := range 10 {
		k := key(t, string(rune('a'+round)))
		var wins atomic.Int32
		var failures atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range contenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
				if err != nil {
					failures.Add(1)
				}
				if ok {
					wins.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if failures.Load() != 0 {
			t.Fatalf("round %d: %d acquires failed with an error", round, failures.Load())
		}
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d of %d concurrent acquires succeeded; want exactly 1", round, wins.Load(), contenders)
		}
		if f := fenceOf(t, e, k); f != 1 {
			t.Fatalf("round %d: fence counter %v after one winner; want 1", round, f)
		}
	}
}

func testFirstFence(t *testing.T, s *suite) {
	e := s.env(t)
	lease := acquire(t, e, key(t, "k"), longTTL)
	if lease.Fence != 1 || lease.Fence.String() != "000000000000001" {
		t.Fatalf("first fence %v (%d); want 000000000000001", lease.Fence, lease.Fence)
	}
}

func testFencesIncrease(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	var prev lock.Lease
	for i := range 12 {
		lease := acquire(t, e, k, longTTL)
		if i > 0 {
			if lease.Fence <= prev.Fence {
				t.Fatalf("fence %v after %v; want strictly greater", lease.Fence, prev.Fence)
			}
			if lease.Fence.String() <= prev.Fence.String() {
				t.Fatalf("fence string %q sorts at or before %q", lease.Fence, prev.Fence)
			}
		}
		if parsed, err := lock.ParseFence(lease.Fence.String()); err != nil || parsed != lease.Fence {
			t.Fatalf("fence %v does not round-trip through its string form: %v, %v", lease.Fence, parsed, err)
		}
		if out := release(t, e, lease.ID); !out.OK {
			t.Fatalf("release: %+v", out)
		}
		prev = lease
	}
}

func testContentionNoFence(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	first := acquire(t, e, k, longTTL)
	for range 5 {
		refused(t, e, k)
	}
	if f := fenceOf(t, e, k); f != first.Fence {
		t.Fatalf("fence counter %v after contended acquires; want %v", f, first.Fence)
	}
	release(t, e, first.ID)
	second := acquire(t, e, k, longTTL)
	if second.Fence != first.Fence+1 {
		t.Fatalf("fence after 5 contended acquires is %v; want %v", second.Fence, first.Fence+1)
	}
}

func testFencesIndependent(t *testing.T, s *suite) {
	e := s.env(t)
	a, b := key(t, "a"), key(t, "b")
	for range 3 {
		release(t, e, acquire(t, e, a, longTTL).ID)
	}
	if got := acquire(t, e, b, longTTL).Fence; got != 1 {
		t.Fatalf("first fence of b after three leases of a: %v; want 1", got)
	}
	if got := fenceOf(t, e, a); got != 3 {
		t.Fatalf("fence counter of a: %v; want 3", got)
	}
}

func testFenceSurvives(t *testing.T, s *suite) {
	e := s.envWith(t, Config{CleanupInIsLocked: true})
	k := key(t, "k")
	// Release.
	l1 := acquire(t, e, k, longTTL)
	release(t, e, l1.ID)
	l2 := acquire(t, e, k, e.shortTTL())
	if l2.Fence != l1.Fence+1 {
		t.Fatalf("fence after release: %v; want %v", l2.Fence, l1.Fence+1)
	}
	// Expiry.
	granted := time.Now()
	e.expire(granted, e.shortTTL())
	l3 := acquire(t, e, k, e.shortTTL())
	if l3.Fence != l2.Fence+1 {
		t.Fatalf("fence after expiry: %v; want %v", l3.Fence, l2.Fence+1)
	}
	// Cleanup: let the record expire past the grace, have IsLocked delete it.
	e.expire(time.Now(), e.shortTTL()+lock.CleanupGrace+e.Margin)
	if isLocked(t, e, k) {
		t.Fatal("IsLocked = true long after expiry")
	}
	if stored(t, e, k) {
		t.Fatal("the record is still stored after IsLocked's cleanup")
	}
	if f := fenceOf(t, e, k); f != l3.Fence {
		t.Fatalf("fence counter %v after cleanup; want %v", f, l3.Fence)
	}
	l4 := acquire(t, e, k, longTTL)
	if l4.Fence != l3.Fence+1 {
		t.Fatalf("fence after cleanup: %v; want %v", l4.Fence, l3.Fence+1)
	}
}

func testFenceSurvivesRestart(t *testing.T, s *suite) {
	e := s.env(t)
	if e.Restart == nil {
		t.Skip("the provider keeps no durable state (Env.Restart is nil); fences cannot survive a restart")
	}
	k := key(t, "k")
	l1 := acquire(t, e, k, longTTL)
	release(t, e, l1.ID)
	e.Restart(t)
	if l2 := acquire(t, e, k, longTTL); l2.Fence != l1.Fence+1 {
		t.Fatalf("fence after restart: %v; want %v", l2.Fence, l1.Fence+1)
	}
}

func testInvalidAcquire(t *testing.T, s *suite) {
	e := s.env(t)
	ctx := t.Context()
	cases := []struct {
		name string
		key  string
		ttl  time.Duration
	}{
		{"empty key", "", time.Second},
		{"513-byte key", strings.Repeat("x", 513), time.Second},
		{"huge key", strings.Repeat("y", 1<<20), time.Second},
		{"zero ttl", key(t, "k"), 0},
		{"negative ttl", key(t, "k"), -time.Second},
		{"sub-millisecond ttl", key(t, "k"), 500 * time.Microsecond},
	}
	for _, c := range cases {
		_, ok, err := e.Locker.Acquire(ctx, c.key, c.ttl)
		if ok {
			t.Fatalf("%s: acquired; want InvalidArgument", c.name)
		}
		wantCode(t, c.name, err, idemkit.CodeInvalidArgument)
	}
	if isLocked(t, e, key(t, "k")) {
		t.Fatal("an invalid acquire left the key locked")
	}
	if f := fenceOf(t, e, key(t, "k")); f != 0 {
		t.Fatalf("an invalid acquire consumed fence %v", f)
	}
}

func testKeyLength(t *testing.T, s *suite) {
	e := s.env(t)
	prefix := key(t, "")
	fill := func(n int) string { return prefix + strings.Repeat("x", n-len(prefix)) }
	k512 := fill(512)
	lease := acquire(t, e, k512, longTTL)
	if lease.Key != k512 {
		t.Fatal("the 512-byte key came back changed")
	}
	if !isLocked(t, e, k512) {
		t.Fatal("the 512-byte key is not locked after acquire")
	}
	if out := release(t, e, lease.ID); !out.OK {
		t.Fatalf("release of the 512-byte key: %+v", out)
	}
	_, _, err := e.Locker.Acquire(t.Context(), fill(513), longTTL)
	wantCode(t, "513-byte key", err, idemkit.CodeInvalidArgument)

	// "e" + U+0301 is 3 bytes; NFC makes it "é", 2 bytes: 600 → 400.
	decomposed := strings.Repeat("e\u0301", 200)
	l2 := acquire(t, e, decomposed+prefix, longTTL)
	if len(l2.Key) != 400+len(prefix) {
		t.Fatalf("normalised key is %d bytes; want %d", len(l2.Key), 400+len(prefix))
	}
	if out := release(t, e, l2.ID); !out.OK {
		t.Fatalf("release of the normalised key: %+v", out)
	}
}

func testNFC(t *testing.T, s *suite) {
	e := s.env(t)
	composed := key(t, "caf\u00e9")
	decomposed := key(t, "cafe\u0301")
	lease := acquire(t, e, decomposed, longTTL)
	if lease.Key != composed {
		t.Fatalf("lease key %q; want the NFC form %q", lease.Key, composed)
	}
	refused(t, e, composed)
	if !isLocked(t, e, composed) {
		t.Fatal("IsLocked(composed) = false while the decomposed spelling is held")
	}
	info, ok := lookupKey(t, e, composed)
	if !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupKey(composed) = %v, %v; want the lease", info, ok)
	}
	if out := release(t, e, lease.ID); !out.OK {
		t.Fatalf("release: %+v", out)
	}
	if isLocked(t, e, decomposed) {
		t.Fatal("still locked after release")
	}
}

func testFenceOverflow(t *testing.T, s *suite) {
	e := s.env(t)
	ctx := t.Context()
	// The maximum itself is still issued.
	k := key(t, "k")
	if err := e.RaiseFence(ctx, k, lock.FenceMax-1); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	lease := acquire(t, e, k, longTTL)
	if lease.Fence != lock.FenceMax || lease.Fence.String() != "900000000000000" {
		t.Fatalf("fence %v; want the maximum 900000000000000", lease.Fence)
	}
	release(t, e, lease.ID)
	// One past it is refused, and nothing is written.
	_, ok, err := e.Locker.Acquire(ctx, k, longTTL)
	if ok {
		t.Fatal("acquired with a fence past the maximum")
	}
	wantCode(t, "acquire past the maximum fence", err, idemkit.CodeInternal)
	if isLocked(t, e, k) {
		t.Fatal("a refused acquire left the key locked")
	}
	if stored(t, e, k) {
		t.Fatal("a refused acquire wrote a lock record")
	}
	if f := fenceOf(t, e, k); f != lock.FenceMax {
		t.Fatalf("fence counter %v after a refused acquire; want it unchanged at %v", f, lock.FenceMax)
	}
	if strings.Contains(err.Error(), k) {
		t.Fatal("the overflow error message contains the raw key")
	}
}

func testFenceWarning(t *testing.T, s *suite) {
	var logs logBuffer
	e := s.envWith(t, Config{Logger: logs.logger()})
	ctx := t.Context()
	quiet := key(t, "quiet")
	if err := e.RaiseFence(ctx, quiet, lock.FenceWarn-1); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	acquire(t, e, quiet, longTTL) // fence = FenceWarn: no warning yet
	if logs.count() != 0 {
		t.Fatalf("a warning was logged at fence %v: %s", lock.FenceWarn, logs.String())
	}
	loud := key(t, "loud-secret-key")
	if err := e.RaiseFence(ctx, loud, lock.FenceWarn); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	lease := acquire(t, e, loud, longTTL)
	if lease.Fence != lock.FenceWarn+1 {
		t.Fatalf("fence %v; want %v", lease.Fence, lock.FenceWarn+1)
	}
	if logs.count() == 0 {
		t.Fatalf("no warning logged at fence %v", lease.Fence)
	}
	if strings.Contains(logs.String(), "loud-secret-key") || strings.Contains(logs.String(), lease.ID) {
		t.Fatalf("the fence warning contains a raw identifier: %s", logs.String())
	}
}

// internalKeys are keys that look like the internal records of real
// backends (fence counters, id indexes, hashed names, Redis hash tags,
// Firestore's reserved and path-like ids) or are otherwise awkward.
func internalKeys(t *testing.T, victim string, victimID string) []string {
	all := []string{
		"fence:" + victim, "fence:" + victim + ":", "id:" + victimID, "idx:" + victimID, "f:" + victim, "i:" + victimID,
		lock.VerbatimPrefix + victim, lock.HashedPrefix + victim,
		lock.StorageKey(victim, 0, nil), lock.StorageKey(victim, 1, nil),
		"{" + victim + "}", victim + ":fence", victim + "\x00", "\x00" + victim,
		"__x__", "__" + victim + "__", ".", "..", "a/b", "a/b/c", "/", "//", victim + "/",
		"syncguard:" + victim, "idemkit:" + victim, "\xff\xfe", strings.Repeat("k", 512),
		key(t, "emoji-\U0001F512"), key(t, "tab\tnewline\n"),
	}
	seen := make(map[string]bool)
	var keys []string
	for _, k := range all {
		if n, err := lock.NormalizeKey(k); err == nil && !seen[n] {
			seen[n] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func testInternalKeys(t *testing.T, s *suite) {
	e := s.env(t)
	victim := key(t, "z")
	// Give the victim a fence history, and hold it.
	release(t, e, acquire(t, e, victim, longTTL).ID)
	held := acquire(t, e, victim, longTTL)
	for _, k := range internalKeys(t, victim, held.ID) {
		lease, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
		if err != nil || !ok {
			t.Fatalf("key %q: acquire = %v, %v; every such key must be an ordinary, free key", k, ok, err)
		}
		if lease.Fence != 1 {
			t.Fatalf("key %q: first fence %v; want 1 (a counter of its own)", k, lease.Fence)
		}
		if info, ok := lookupID(t, e, lease.ID); !ok || info.Fence != 1 {
			t.Fatalf("key %q: LookupID does not find the lock", k)
		}
		if out := extend(t, e, lease.ID, longTTL); !out.OK {
			t.Fatalf("key %q: extend: %+v", k, out)
		}
		if out := release(t, e, lease.ID); !out.OK {
			t.Fatalf("key %q: release: %+v", k, out)
		}
		if isLocked(t, e, k) {
			t.Fatalf("key %q: still locked after release", k)
		}
	}
	// The victim is untouched: still held by the same lease, same counter.
	info, ok := lookupKey(t, e, victim)
	if !ok || info.Fence != held.Fence {
		t.Fatalf("the victim's lock changed: %v, %v", info, ok)
	}
	if f := fenceOf(t, e, victim); f != 2 {
		t.Fatalf("the victim's fence counter is %v; want 2", f)
	}
	release(t, e, held.ID)
	if l := acquire(t, e, victim, longTTL); l.Fence != 3 {
		t.Fatalf("the victim's next fence is %v; want 3", l.Fence)
	}
}

func testAcquiredAtMonotone(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	var prev lock.Lease
	for i := range 8 {
		if e.fake() {
			e.Advance(time.Millisecond)
		}
		lease := acquire(t, e, k, longTTL)
		if i > 0 && lease.AcquiredAt.Before(prev.AcquiredAt) {
			t.Fatalf("fence %v acquired at %v, before fence %v at %v", lease.Fence, lease.AcquiredAt, prev.Fence, prev.AcquiredAt)
		}
		release(t, e, lease.ID)
		prev = lease
	}
}

// testOneHolder races goroutines acquiring and releasing one key; each
// holder checks, while it holds the lease, that nobody else does.
func testOneHolder(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "hot")
	const workers = 16
	const target = 300
	var holders, grants atomic.Int32
	var mu sync.Mutex
	var fences []lock.Fence
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for grants.Load() < target && time.Now().Before(deadline) {
				lease, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
				if err != nil {
					errs <- "acquire: " + err.Error()
					return
				}
				if !ok {
					continue
				}
				if n := holders.Add(1); n != 1 {
					errs <- "two holders at once"
				}
				mu.Lock()
				fences = append(fences, lease.Fence)
				mu.Unlock()
				grants.Add(1)
				holders.Add(-1)
				out, err := e.Locker.Release(t.Context(), lease.ID)
				if err != nil || !out.OK {
					errs <- "a holder could not release its own lease"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Fatal(msg)
	}
	if grants.Load() < workers {
		t.Fatalf("only %d leases granted", grants.Load())
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] != fences[i-1]+1 {
			t.Fatalf("lease %d got fence %v after %v; want consecutive fences in grant order", i, fences[i], fences[i-1])
		}
	}
}
