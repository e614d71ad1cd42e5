package locktest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

func init() {
	register(
		testCase{"AcquireFreeKey", testAcquireFree},
		testCase{"SecondAcquireIsContention", testContention},
		testCase{"DifferentKeysIndependent", testDifferentKeys},
		testCase{"ConcurrentAcquireOneWinner", testConcurrentOneWinner},
		testCase{"FirstFence", testFirstFence},
		testCase{"FencesStrictlyIncrease", testFencesIncrease},
		testCase{"ContentionConsumesNoFence", testContentionNoFence},
		testCase{"FencesIndependentPerKey", testFencesIndependent},
		testCase{"FenceSurvivesReleaseExpiryCleanup", testFenceSurvives},
		testCase{"FenceAheadOfClockSurvivesReleaseExpiryCleanup", testFenceAhead},
		testCase{"FenceSurvivesRestart", testFenceSurvivesRestart},
		testCase{"InvalidAcquireArguments", testInvalidAcquire},
		testCase{"KeyLengthBoundary", testKeyLength},
		testCase{"NormalisedKeysAddressOneLock", testNFC},
		testCase{"FenceOverflowIsAtomic", testFenceOverflow},
		testCase{"FenceWarningWithoutRawKey", testFenceWarning},
		testCase{"UserKeysNeverAddressInternalRecords", testInternalKeys},
		testCase{"AcquiredAtMonotoneWithFence", testAcquiredAtMonotone},
		testCase{"ExactlyOneHolderAtAnyInstant", testOneHolder},
		testCase{"NoStateWithoutExpiry", testNoStateWithoutExpiry},
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
	if got := lease.Fence.String(); len(got) != idemkit.FenceDigits {
		t.Fatalf("fence %q is not %d digits", got, idemkit.FenceDigits)
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
		var winner atomic.Uint64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range contenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lease, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
				if err != nil {
					failures.Add(1)
				}
				if ok {
					wins.Add(1)
					winner.Store(uint64(lease.Fence))
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
		if f := fenceOf(t, e, k); f != idemkit.Fence(winner.Load()) {
			t.Fatalf("round %d: the key carries fence %v after one winner; want the winner's %v", round, f, winner.Load())
		}
	}
}

func testFirstFence(t *testing.T, s *suite) {
	e := s.env(t)
	lease := acquire(t, e, key(t, "k"), longTTL)
	// Fences derive from the backend's clock in milliseconds: far below
	// the warning threshold for centuries.
	if lease.Fence < 1 || lease.Fence >= idemkit.FenceWarn || len(lease.Fence.String()) != idemkit.FenceDigits {
		t.Fatalf("first fence %v (%d); want 15 digits, at least 1 and below %v", lease.Fence, lease.Fence, idemkit.FenceWarn)
	}
	if f := fenceOf(t, e, key(t, "k")); f != lease.Fence {
		t.Fatalf("the key carries fence %v; want the lease's %v", f, lease.Fence)
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
		if parsed, err := idemkit.ParseFence(lease.Fence.String()); err != nil || parsed != lease.Fence {
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
		t.Fatalf("the key carries fence %v after contended acquires; want it unchanged at %v", f, first.Fence)
	}
	release(t, e, first.ID)
	second := acquire(t, e, k, longTTL)
	if second.Fence <= first.Fence {
		t.Fatalf("fence after 5 contended acquires and a release is %v; want above %v", second.Fence, first.Fence)
	}
}

func testFencesIndependent(t *testing.T, s *suite) {
	e := s.env(t)
	a, b := key(t, "a"), key(t, "b")
	la := acquire(t, e, a, longTTL)
	release(t, e, la.ID)
	// Raise a's fence far above the clock: b's fences must not follow it.
	raised := la.Fence + ahead
	if err := e.RaiseFence(t.Context(), a, raised); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	la2 := acquire(t, e, a, longTTL)
	if la2.Fence <= raised {
		t.Fatalf("a's fence after raising it to %v is %v; want above it", raised, la2.Fence)
	}
	lb := acquire(t, e, b, longTTL)
	if lb.Fence < 1 || !e.SharedFloor && lb.Fence >= raised {
		t.Fatalf("b's first fence is %v after a's was raised to %v; want a fence of b's own", lb.Fence, raised)
	}
	if got := fenceOf(t, e, a); got != la2.Fence {
		t.Fatalf("a carries fence %v; want %v", got, la2.Fence)
	}
	if got := fenceOf(t, e, b); got != lb.Fence {
		t.Fatalf("b carries fence %v; want %v", got, lb.Fence)
	}
}

func testFenceSurvives(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	// Release.
	l1 := acquire(t, e, k, longTTL)
	release(t, e, l1.ID)
	l2 := acquire(t, e, k, e.shortTTL())
	if l2.Fence <= l1.Fence {
		t.Fatalf("fence after release: %v; want above %v", l2.Fence, l1.Fence)
	}
	// Expiry.
	granted := time.Now()
	e.expire(granted, e.shortTTL())
	l3 := acquire(t, e, k, e.shortTTL())
	if l3.Fence <= l2.Fence {
		t.Fatalf("fence after expiry: %v; want above %v", l3.Fence, l2.Fence)
	}
	// Long gone: past the claim's retention, when the engine may have
	// removed the record (on an injected clock only; a real one would
	// wait for minutes).
	if !e.fake() {
		return
	}
	e.Advance(e.shortTTL() + store.ClaimRetention + time.Minute)
	if isLocked(t, e, k) {
		t.Fatal("IsLocked = true long after expiry")
	}
	l4 := acquire(t, e, k, longTTL)
	if l4.Fence <= l3.Fence {
		t.Fatalf("fence long after expiry: %v; want above %v", l4.Fence, l3.Fence)
	}
}

// testFenceAhead raises a key's fence far above the backend's clock, where
// the clock alone would issue lower fences, and checks that the fence
// survives a release, an expiry and the record's removal: what is removed
// before the clock passes its fence must leave a tombstone that carries it
// (or a floor that does).
func testFenceAhead(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	probe := acquire(t, e, key(t, "probe"), longTTL)
	raised := probe.Fence + ahead
	if err := e.RaiseFence(t.Context(), k, raised); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	if isLocked(t, e, k) || stored(t, e, k) {
		t.Fatal("a raised fence looks like a lock")
	}
	// Release.
	l1 := acquire(t, e, k, longTTL)
	if l1.Fence <= raised {
		t.Fatalf("fence after raising it to %v: %v; want above it", raised, l1.Fence)
	}
	release(t, e, l1.ID)
	if isLocked(t, e, k) {
		t.Fatal("IsLocked = true after release")
	}
	if _, ok := lookupKey(t, e, k); ok {
		t.Fatal("LookupKey finds a released lock")
	}
	if _, ok := lookupID(t, e, l1.ID); ok {
		t.Fatal("LookupID finds a released lock")
	}
	if out := release(t, e, l1.ID); out.OK || out.Expired {
		t.Fatalf("second release: %+v; want not OK, not-found", out)
	}
	if out := extend(t, e, l1.ID, longTTL); out.OK {
		t.Fatalf("extend after release: %+v; want not OK", out)
	}
	if f := fenceOf(t, e, k); !e.SharedFloor && f != l1.Fence {
		t.Fatalf("the key carries fence %v after release; want %v: the clock has not passed it", f, l1.Fence)
	}
	l2 := acquire(t, e, k, e.shortTTL())
	if l2.Fence <= l1.Fence {
		t.Fatalf("fence after release: %v; want above %v", l2.Fence, l1.Fence)
	}
	// Expiry.
	e.expire(time.Now(), e.shortTTL())
	l3 := acquire(t, e, k, e.shortTTL())
	if l3.Fence <= l2.Fence {
		t.Fatalf("fence after expiry: %v; want above %v", l3.Fence, l2.Fence)
	}
	// Long gone (on an injected clock: see testFenceSurvives).
	if !e.fake() {
		return
	}
	e.Advance(e.shortTTL() + store.ClaimRetention + time.Minute)
	if isLocked(t, e, k) {
		t.Fatal("IsLocked = true long after expiry")
	}
	if f := fenceOf(t, e, k); !e.SharedFloor && f != l3.Fence {
		t.Fatalf("the key carries fence %v long after expiry; want %v: the clock has not passed it", f, l3.Fence)
	}
	l4 := acquire(t, e, k, longTTL)
	if l4.Fence <= l3.Fence {
		t.Fatalf("fence long after expiry: %v; want above %v", l4.Fence, l3.Fence)
	}
}

func testFenceSurvivesRestart(t *testing.T, s *suite) {
	e := s.envWith(t, Config{Restart: true}, nil)
	if e.Restart == nil {
		t.Skip("the provider keeps no durable state (Env.Restart is nil); fences cannot survive a restart")
	}
	k, raisedKey := key(t, "k"), key(t, "raised")
	l1 := acquire(t, e, k, longTTL)
	release(t, e, l1.ID)
	// And a fence ahead of the clock, which only a tombstone carries.
	if err := e.RaiseFence(t.Context(), raisedKey, l1.Fence+ahead); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	r1 := acquire(t, e, raisedKey, longTTL)
	release(t, e, r1.ID)
	e.Restart(t)
	if l2 := acquire(t, e, k, longTTL); l2.Fence <= l1.Fence {
		t.Fatalf("fence after restart: %v; want above %v", l2.Fence, l1.Fence)
	}
	if r2 := acquire(t, e, raisedKey, longTTL); r2.Fence <= r1.Fence {
		t.Fatalf("fence ahead of the clock after restart: %v; want above %v", r2.Fence, r1.Fence)
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
		t.Fatalf("an invalid acquire left fence %v", f)
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
	if err := e.RaiseFence(ctx, k, idemkit.FenceMax-1); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	lease := acquire(t, e, k, longTTL)
	if lease.Fence != idemkit.FenceMax || lease.Fence.String() != "900000000000000" {
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
	if f := fenceOf(t, e, k); f != idemkit.FenceMax && !(e.SharedFloor && f == 0) {
		t.Fatalf("the key carries fence %v after a refused acquire; want it unchanged at %v", f, idemkit.FenceMax)
	}
	if _, ok, err := e.Locker.Acquire(ctx, k, longTTL); ok || idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("a second acquire past the maximum: %v, %v; want Internal again", ok, err)
	}
	if strings.Contains(err.Error(), k) {
		t.Fatal("the overflow error message contains the raw key")
	}
}

func testFenceWarning(t *testing.T, s *suite) {
	var logs logBuffer
	e := s.envWith(t, Config{}, logs.logger())
	ctx := t.Context()
	quiet := key(t, "quiet")
	if err := e.RaiseFence(ctx, quiet, idemkit.FenceWarn-1); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	acquire(t, e, quiet, longTTL) // fence = FenceWarn: no warning yet
	if logs.count() != 0 {
		t.Fatalf("a warning was logged at fence %v: %s", idemkit.FenceWarn, logs.String())
	}
	loud := key(t, "loud-secret-key")
	if err := e.RaiseFence(ctx, loud, idemkit.FenceWarn); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	lease := acquire(t, e, loud, longTTL)
	if lease.Fence != idemkit.FenceWarn+1 {
		t.Fatalf("fence %v; want %v", lease.Fence, idemkit.FenceWarn+1)
	}
	if logs.count() == 0 {
		t.Fatalf("no warning logged at fence %v", lease.Fence)
	}
	if strings.Contains(logs.String(), "loud-secret-key") || strings.Contains(logs.String(), lease.ID) {
		t.Fatalf("the fence warning contains a raw identifier: %s", logs.String())
	}
}

// internalKeys are keys that look like the internal records of real
// backends (fence records, id indexes, hashed names, Redis hash tags,
// Firestore's reserved and path-like ids) or are otherwise awkward.
func internalKeys(t *testing.T, victim string, victimID string) []string {
	all := []string{
		"fence:" + victim, "fence:" + victim + ":", "id:" + victimID, "idx:" + victimID, "f:" + victim, "i:" + victimID,
		"k:" + victim, "h:" + victim, "h:" + victimID, "lock:" + victim, "idx:" + victim,
		"{" + victim + "}", victim + ":fence", victim + "\x00", "\x00" + victim,
		"__x__", "__" + victim + "__", ".", "..", "a/b", "a/b/c", "/", "//", victim + "/",
		"syncguard:" + victim, "idemkit:" + victim, "\xff\xfe", strings.Repeat("k", 512),
		key(t, "emoji-\U0001F512"), key(t, "tab\tnewline\n"),
	}
	seen := make(map[string]bool)
	var keys []string
	for _, k := range all {
		if n := norm.NFC.String(k); len(n) <= lock.MaxKeyBytes && !seen[n] {
			seen[n] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func testInternalKeys(t *testing.T, s *suite) {
	e := s.env(t)
	victim := key(t, "z")
	// Give the victim a fence far above the clock, and hold it: a key that
	// shared the victim's record would get a fence above that one.
	v0 := acquire(t, e, victim, longTTL)
	release(t, e, v0.ID)
	raised := v0.Fence + ahead
	if err := e.RaiseFence(t.Context(), victim, raised); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	held := acquire(t, e, victim, longTTL)
	for _, k := range internalKeys(t, victim, held.ID) {
		lease, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
		if err != nil || !ok {
			t.Fatalf("key %q: acquire = %v, %v; every such key must be an ordinary, free key", k, ok, err)
		}
		if !e.SharedFloor && lease.Fence >= raised {
			t.Fatalf("key %q: first fence %v follows the victim's %v; want a fence of its own", k, lease.Fence, raised)
		}
		if info, ok := lookupID(t, e, lease.ID); !ok || info.Fence != lease.Fence {
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
	// The victim is untouched: still held by the same lease.
	info, ok := lookupKey(t, e, victim)
	if !ok || info.Fence != held.Fence {
		t.Fatalf("the victim's lock changed: %v, %v", info, ok)
	}
	if f := fenceOf(t, e, victim); f != held.Fence {
		t.Fatalf("the victim carries fence %v; want %v", f, held.Fence)
	}
	release(t, e, held.ID)
	if l := acquire(t, e, victim, longTTL); l.Fence <= held.Fence {
		t.Fatalf("the victim's next fence is %v; want above %v", l.Fence, held.Fence)
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
	var fences []idemkit.Fence
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
		if fences[i] <= fences[i-1] {
			t.Fatalf("lease %d got fence %v after %v; want increasing fences in grant order", i, fences[i], fences[i-1])
		}
	}
}

// testNoStateWithoutExpiry runs a burst of everything that writes (acquires,
// contention, releases, extends, expiries, raised fences, fences ahead of
// the clock) and checks that the backend holds nothing without an
// expiry.
func testNoStateWithoutExpiry(t *testing.T, s *suite) {
	e := s.env(t)
	if e.Keys == nil {
		t.Skip("the provider cannot list what it holds without expiry (Env.Keys is nil)")
	}
	ctx := t.Context()
	ttl := e.shortTTL()
	probe := acquire(t, e, key(t, "probe"), longTTL)
	for i := range 6 {
		k := key(t, fmt.Sprintf("k%d", i))
		if i%2 == 1 {
			if err := e.RaiseFence(ctx, k, probe.Fence+ahead); err != nil {
				t.Fatalf("RaiseFence: %v", err)
			}
		}
		lease := acquire(t, e, k, ttl)
		refused(t, e, k)
		if out := extend(t, e, lease.ID, ttl); !out.OK {
			t.Fatalf("extend: %+v", out)
		}
		if i%3 == 0 {
			release(t, e, lease.ID)
		}
	}
	if err := e.RaiseFence(ctx, key(t, "raised only"), idemkit.FenceMax-1); err != nil {
		t.Fatalf("RaiseFence: %v", err)
	}
	top := acquire(t, e, key(t, "raised only"), longTTL)
	release(t, e, top.ID)
	if _, _, err := e.Locker.Acquire(ctx, key(t, "raised only"), longTTL); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("acquire past the maximum fence: %v; want Internal", err)
	}
	e.expire(time.Now(), ttl)
	for i := range 6 {
		if isLocked(t, e, key(t, fmt.Sprintf("k%d", i))) {
			t.Fatal("IsLocked = true after expiry")
		}
	}
	keys, err := e.Keys(ctx)
	if err != nil {
		t.Fatalf("Keys: %v", err)
	}
	if len(keys) != 0 {
		t.Fatalf("the backend holds %d keys with no expiry: %q", len(keys), keys)
	}
}
