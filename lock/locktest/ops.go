package locktest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

func init() {
	register(
		testCase{"MalformedLockIDsRejectedBeforeIO", testMalformedIDs},
		testCase{"ReleaseByOwnerFreesKey", testRelease},
		testCase{"ReleaseAtMostOnce", testReleaseTwice},
		testCase{"ForeignLockIDChangesNothing", testForeignID},
		testCase{"UnknownLockIDIsNotFound", testUnknownID},
		testCase{"ExtendReplacesExpiry", testExtendReplaces},
		testCase{"ExtendKeepsAcquiredAtAndFence", testExtendKeeps},
		testCase{"ExtendAfterExpiryDoesNotResurrect", testExtendExpired},
		testCase{"OldHolderLosesAfterTakeover", testOldHolder},
		testCase{"IsLockedIsAPureRead", testIsLocked},
		testCase{"LookupIsSanitised", testLookupSanitised},
		testCase{"LookupMissingAndExpired", testLookupMissing},
		testCase{"LookupIDAfterTakeover", testLookupAfterTakeover},
		testCase{"LookupChangesNothing", testLookupReadOnly},
		testCase{"RawLookups", testRawLookups},
		testCase{"OwnsEqualsLookupID", testOwns},
		testCase{"EndedContextBeforeDispatch", testEndedContext},
		testCase{"TransportFailuresAreCodedErrors", testBroken},
		testCase{"KeyedReleaseAndExtend", testKeyed},
	)
}

var malformedIDs = []string{
	"", "short", "AAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAAA",
	"AAAAAAAAAAAAAAAAAAAAA+", "AAAAAAAAAAAAAAAAAAAAA/", "AAAAAAAAAAAAAAAAAAAA==",
	"AAAAAAAAAAAAAAAAAAAAA\x00", "AAAAAAAAAAAAAAAAAAAA\u00e9", " AAAAAAAAAAAAAAAAAAAAA",
	"AAAAAAAAAAAAAAAAAAAAA.",
}

func testMalformedIDs(t *testing.T, s *suite) {
	e := s.env(t)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	check := func(phase string, ctx context.Context) {
		for _, id := range malformedIDs {
			_, err := e.Locker.Release(ctx, id)
			wantCode(t, phase+" release "+fmt.Sprintf("%q", id), err, idemkit.CodeInvalidArgument)
			_, err = e.Locker.Extend(ctx, id, time.Second)
			wantCode(t, phase+" extend", err, idemkit.CodeInvalidArgument)
			_, _, err = e.Locker.LookupID(ctx, id)
			wantCode(t, phase+" lookup", err, idemkit.CodeInvalidArgument)
			_, err = lock.Owns(ctx, e.Locker, id)
			wantCode(t, phase+" owns", err, idemkit.CodeInvalidArgument)
			if id != "" && len(id) > 3 && strings.Contains(err.Error(), id) {
				t.Fatalf("the error message repeats the malformed id: %v", err)
			}
		}
	}
	check("live backend:", t.Context())
	// Validation comes before the ctx check and before any I/O: an ended
	// ctx and an unreachable backend change nothing.
	check("ended ctx:", canceled)
	e.Break()
	check("broken backend:", t.Context())
	_, _, err := e.Locker.Acquire(t.Context(), "", time.Second)
	wantCode(t, "broken backend: empty key", err, idemkit.CodeInvalidArgument)
	_, err = e.Locker.IsLocked(t.Context(), strings.Repeat("x", 600))
	wantCode(t, "broken backend: long key", err, idemkit.CodeInvalidArgument)
}

func testRelease(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	out := release(t, e, lease.ID)
	if !out.OK || out.Expired {
		t.Fatalf("release by the owner: %+v; want OK", out)
	}
	if isLocked(t, e, k) {
		t.Fatal("IsLocked = true right after release")
	}
	if _, ok := lookupKey(t, e, k); ok {
		t.Fatal("LookupKey finds a released lock")
	}
	acquire(t, e, k, longTTL)
}

func testReleaseTwice(t *testing.T, s *suite) {
	e := s.env(t)
	lease := acquire(t, e, key(t, "k"), longTTL)
	if out := release(t, e, lease.ID); !out.OK {
		t.Fatalf("first release: %+v", out)
	}
	out := release(t, e, lease.ID)
	if out.OK || out.Expired {
		t.Fatalf("second release: %+v; want not OK, not-found", out)
	}
	if out := extend(t, e, lease.ID, longTTL); out.OK {
		t.Fatalf("extend after release: %+v; want not OK", out)
	}
}

func testForeignID(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	other := acquire(t, e, key(t, "other"), longTTL)
	release(t, e, other.ID) // a real id, no longer holding anything
	before, _ := lookupKey(t, e, k)
	for _, id := range []string{randomID(), other.ID, "AAAAAAAAAAAAAAAAAAAAAA"} {
		if out := release(t, e, id); out.OK || out.Expired {
			t.Fatalf("release with a foreign id: %+v; want not OK, not-found", out)
		}
		if out := extend(t, e, id, time.Hour); out.OK || out.Expired {
			t.Fatalf("extend with a foreign id: %+v; want not OK, not-found", out)
		}
	}
	after, ok := lookupKey(t, e, k)
	if !ok {
		t.Fatal("the holder's lock vanished")
	}
	sameInfo(t, "foreign release/extend", before, after)
	if out := release(t, e, lease.ID); !out.OK {
		t.Fatalf("the holder's release: %+v", out)
	}
}

func testUnknownID(t *testing.T, s *suite) {
	e := s.env(t)
	id := randomID()
	if out := release(t, e, id); out.OK || out.Expired {
		t.Fatalf("release of a never-issued id: %+v", out)
	}
	if out := extend(t, e, id, time.Second); out.OK || out.Expired {
		t.Fatalf("extend of a never-issued id: %+v", out)
	}
	if _, ok := lookupID(t, e, id); ok {
		t.Fatal("LookupID found a never-issued id")
	}
}

func testExtendReplaces(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	e.pass(e.Margin)
	// A shorter TTL shortens the lease: the expiry is replaced, not added to.
	short := e.shortTTL()
	sent := time.Now()
	out := extend(t, e, lease.ID, short)
	if !out.OK {
		t.Fatalf("extend: %+v", out)
	}
	if !out.ExpiresAt.Before(lease.ExpiresAt) {
		t.Fatalf("extend to %v returned expiry %v, not before the original %v", short, out.ExpiresAt, lease.ExpiresAt)
	}
	if e.fake() {
		if want := lease.AcquiredAt.Add(e.Margin + short); !out.ExpiresAt.Equal(want) {
			t.Fatalf("extend: expiry %v; want now + ttl = %v", out.ExpiresAt, want)
		}
	} else if got := out.ExpiresAt.Sub(lease.AcquiredAt); got < e.Margin+short-time.Millisecond {
		t.Fatalf("extend: expiry %v after acquire; want at least %v", got, e.Margin+short)
	}
	info, ok := lookupKey(t, e, k)
	if !ok || !info.ExpiresAt.Equal(out.ExpiresAt) {
		t.Fatalf("LookupKey after extend: %v, %v; want expiry %v", info, ok, out.ExpiresAt)
	}
	// And it now runs out at the new, earlier time.
	e.expire(sent, short)
	if isLocked(t, e, k) {
		t.Fatal("still locked after the shortened lease ran out")
	}
}

func testExtendKeeps(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	e.pass(e.Margin)
	if out := extend(t, e, lease.ID, 2*longTTL); !out.OK {
		t.Fatalf("extend: %+v", out)
	}
	info, ok := lookupKey(t, e, k)
	if !ok {
		t.Fatal("LookupKey found nothing after extend")
	}
	if !info.AcquiredAt.Equal(lease.AcquiredAt) || info.Fence != lease.Fence {
		t.Fatalf("extend changed acquired-at or fence: %v; lease %v", info, lease)
	}
}

func testExtendExpired(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	ttl := e.shortTTL()
	lease := acquire(t, e, k, ttl)
	e.expire(time.Now(), ttl)
	out := extend(t, e, lease.ID, longTTL)
	if out.OK {
		t.Fatalf("extend after expiry: %+v; want not OK", out)
	}
	if isLocked(t, e, k) {
		t.Fatal("extend after expiry resurrected the lock")
	}
	if out := release(t, e, lease.ID); out.OK {
		t.Fatalf("release after expiry: %+v; want not OK", out)
	}
	acquire(t, e, k, longTTL)
}

func testOldHolder(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	ttl := e.shortTTL()
	a := acquire(t, e, k, ttl)
	e.expire(time.Now(), ttl)
	b := acquire(t, e, k, longTTL)
	if b.Fence <= a.Fence {
		t.Fatalf("the new holder's fence %v is not above the old %v", b.Fence, a.Fence)
	}
	if out := extend(t, e, a.ID, longTTL); out.OK {
		t.Fatalf("the old holder extended the new holder's lock: %+v", out)
	}
	if out := release(t, e, a.ID); out.OK {
		t.Fatalf("the old holder released the new holder's lock: %+v", out)
	}
	info, ok := lookupKey(t, e, k)
	if !ok || info.Fence != b.Fence {
		t.Fatalf("the new holder lost its lock: %v, %v", info, ok)
	}
	if out := release(t, e, b.ID); !out.OK {
		t.Fatalf("the new holder's release: %+v", out)
	}
}

func testIsLocked(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	if isLocked(t, e, k) {
		t.Fatal("IsLocked = true for a key never locked")
	}
	ttl := e.shortTTL()
	acquire(t, e, k, ttl)
	if !isLocked(t, e, k) {
		t.Fatal("IsLocked = false for a live lock")
	}
	e.expire(time.Now(), ttl)
	for range 3 {
		if isLocked(t, e, k) {
			t.Fatal("IsLocked = true for an expired lock")
		}
	}
}

func testLookupSanitised(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "secret-key")
	lease := acquire(t, e, k, longTTL)
	byKey, ok := lookupKey(t, e, k)
	if !ok {
		t.Fatal("LookupKey found nothing")
	}
	byID, ok := lookupID(t, e, lease.ID)
	if !ok {
		t.Fatal("LookupID found nothing")
	}
	sameInfo(t, "lookup by key and by id", byKey, byID)
	for _, info := range []lock.Info{byKey, byID} {
		if info.Fence != lease.Fence || !info.ExpiresAt.Equal(lease.ExpiresAt) || !info.AcquiredAt.Equal(lease.AcquiredAt) {
			t.Fatalf("lookup %v does not describe the lease %v", info, lease)
		}
		if info.KeyHash == "" || info.IDHash == "" || info.KeyHash == k || info.IDHash == lease.ID {
			t.Fatalf("lookup hashes %q, %q are missing or raw", info.KeyHash, info.IDHash)
		}
		js, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{fmt.Sprint(info), fmt.Sprintf("%+v", info), fmt.Sprintf("%#v", info), string(js)} {
			if strings.Contains(text, "secret-key") || strings.Contains(text, lease.ID) {
				t.Fatalf("a formatted lookup result contains a raw identifier: %s", text)
			}
		}
	}
}

func testLookupMissing(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	if _, ok := lookupKey(t, e, k); ok {
		t.Fatal("LookupKey found a lock never taken")
	}
	ttl := e.shortTTL()
	lease := acquire(t, e, k, ttl)
	e.expire(time.Now(), ttl)
	if _, ok := lookupKey(t, e, k); ok {
		t.Fatal("LookupKey found an expired lock")
	}
	if _, ok := lookupID(t, e, lease.ID); ok {
		t.Fatal("LookupID found an expired lock")
	}
}

func testLookupAfterTakeover(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	ttl := e.shortTTL()
	a := acquire(t, e, k, ttl)
	e.expire(time.Now(), ttl)
	b := acquire(t, e, k, longTTL)
	if _, ok := lookupID(t, e, a.ID); ok {
		t.Fatal("LookupID of the old holder's id finds the new holder's lock")
	}
	if info, ok := lookupID(t, e, b.ID); !ok || info.Fence != b.Fence {
		t.Fatalf("LookupID of the new holder: %v, %v", info, ok)
	}
}

func testLookupReadOnly(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	first, _ := lookupKey(t, e, k)
	for range 3 {
		e.pass(e.Margin / 2)
		lookupKey(t, e, k)
		lookupID(t, e, lease.ID)
		isLocked(t, e, k)
		if _, err := lock.Owns(t.Context(), e.Locker, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	last, _ := lookupKey(t, e, k)
	sameInfo(t, "lookups", first, last)
	if !last.ExpiresAt.Equal(lease.ExpiresAt) {
		t.Fatalf("lookups moved the expiry from %v to %v", lease.ExpiresAt, last.ExpiresAt)
	}
}

func testRawLookups(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	lease := acquire(t, e, k, longTTL)
	raw, ok, err := lock.LookupKeyRaw(t.Context(), e.Locker, k)
	if err != nil || !ok {
		t.Fatalf("LookupKeyRaw: %v, %v", ok, err)
	}
	if raw.Key != k || raw.ID != lease.ID || raw.Fence != lease.Fence {
		t.Fatalf("LookupKeyRaw = key %q id %q fence %v; want %q %q %v", raw.Key, raw.ID, raw.Fence, k, lease.ID, lease.Fence)
	}
	raw, ok, err = lock.LookupIDRaw(t.Context(), e.Locker, lease.ID)
	if err != nil || !ok || raw.Key != k || raw.ID != lease.ID {
		t.Fatalf("LookupIDRaw = %q %q %v %v", raw.Key, raw.ID, ok, err)
	}
	if _, ok, err := lock.LookupIDRaw(t.Context(), e.Locker, randomID()); ok || err != nil {
		t.Fatalf("LookupIDRaw of an unknown id = %v, %v", ok, err)
	}
}

func testOwns(t *testing.T, s *suite) {
	e := s.env(t)
	lease := acquire(t, e, key(t, "k"), longTTL)
	for _, c := range []struct {
		name string
		id   string
	}{{"holder", lease.ID}, {"unknown", randomID()}} {
		owns, err := lock.Owns(t.Context(), e.Locker, c.id)
		if err != nil {
			t.Fatal(err)
		}
		_, found := lookupID(t, e, c.id)
		if owns != found {
			t.Fatalf("%s: Owns = %v, LookupID found = %v", c.name, owns, found)
		}
	}
	if owns, _ := lock.Owns(t.Context(), e.Locker, lease.ID); !owns {
		t.Fatal("Owns = false for the holder")
	}
	release(t, e, lease.ID)
	if owns, _ := lock.Owns(t.Context(), e.Locker, lease.ID); owns {
		t.Fatal("Owns = true after release")
	}
}

func testEndedContext(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	held := acquire(t, e, key(t, "held"), longTTL)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		code idemkit.Code
	}{{canceled, idemkit.CodeAborted}, {expired, idemkit.CodeNetworkTimeout}} {
		_, ok, err := e.Locker.Acquire(c.ctx, k, longTTL)
		if ok {
			t.Fatal("acquired with an ended ctx")
		}
		wantCode(t, "acquire", err, c.code)
		_, err = e.Locker.Release(c.ctx, held.ID)
		wantCode(t, "release", err, c.code)
		_, err = e.Locker.Extend(c.ctx, held.ID, time.Second)
		wantCode(t, "extend", err, c.code)
		_, err = e.Locker.IsLocked(c.ctx, k)
		wantCode(t, "is-locked", err, c.code)
		_, _, err = e.Locker.LookupKey(c.ctx, k)
		wantCode(t, "lookup-key", err, c.code)
		_, _, err = e.Locker.LookupID(c.ctx, held.ID)
		wantCode(t, "lookup-id", err, c.code)
	}
	if isLocked(t, e, k) {
		t.Fatal("an acquire with an ended ctx took the lock")
	}
	if f := fenceOf(t, e, k); f != 0 {
		t.Fatalf("an acquire with an ended ctx left fence %v", f)
	}
	info, ok := lookupID(t, e, held.ID)
	if !ok || !info.ExpiresAt.Equal(held.ExpiresAt) {
		t.Fatal("a release or extend with an ended ctx changed the held lock")
	}
}

func testBroken(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	held := acquire(t, e, k, longTTL)
	e.Break()
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s on an unreachable backend: no error; a transport failure must never look like a result", what)
		}
		code := idemkit.CodeOf(err)
		if code != idemkit.CodeServiceUnavailable && code != idemkit.CodeNetworkTimeout {
			t.Fatalf("%s on an unreachable backend: code %v (%v); want ServiceUnavailable or NetworkTimeout", what, code, err)
		}
		if strings.Contains(err.Error(), k) || strings.Contains(err.Error(), held.ID) {
			t.Fatalf("%s: the error message contains a raw identifier: %v", what, err)
		}
	}
	_, _, err := e.Locker.Acquire(ctx, key(t, "other"), longTTL)
	check("acquire", err)
	_, err = e.Locker.Release(ctx, held.ID)
	check("release", err)
	_, err = e.Locker.Extend(ctx, held.ID, time.Second)
	check("extend", err)
	_, err = e.Locker.IsLocked(ctx, k)
	check("is-locked", err)
	_, _, err = e.Locker.LookupKey(ctx, k)
	check("lookup-key", err)
	_, _, err = e.Locker.LookupID(ctx, held.ID)
	check("lookup-id", err)
}

func testKeyed(t *testing.T, s *suite) {
	e := s.env(t)
	var kl lock.KeyedLocker = e.Locker
	ctx := t.Context()
	a, b := key(t, "caf\u00e9"), key(t, "b")
	la := acquire(t, e, a, longTTL)
	lb := acquire(t, e, b, longTTL)
	before, _ := lookupKey(t, e, a)
	// The wrong key, or a foreign id, changes nothing.
	for _, c := range []struct{ key, id string }{{b, la.ID}, {a, lb.ID}, {a, randomID()}, {key(t, "never"), la.ID}} {
		out, err := kl.ExtendKey(ctx, c.key, c.id, time.Hour)
		if err != nil || out.OK || out.Expired {
			t.Fatalf("ExtendKey with a mismatched key and id: %+v, %v; want not found", out, err)
		}
		out, err = kl.ReleaseKey(ctx, c.key, c.id)
		if err != nil || out.OK || out.Expired {
			t.Fatalf("ReleaseKey with a mismatched key and id: %+v, %v; want not found", out, err)
		}
	}
	after, _ := lookupKey(t, e, a)
	sameInfo(t, "mismatched keyed operations", before, after)
	// The right pair works, with either spelling of the key.
	out, err := kl.ExtendKey(ctx, key(t, "cafe\u0301"), la.ID, 2*longTTL)
	if err != nil || !out.OK || !out.ExpiresAt.After(la.ExpiresAt) {
		t.Fatalf("ExtendKey: %+v, %v", out, err)
	}
	if out, err := kl.ReleaseKey(ctx, a, la.ID); err != nil || !out.OK {
		t.Fatalf("ReleaseKey: %+v, %v", out, err)
	}
	if isLocked(t, e, a) || !isLocked(t, e, b) {
		t.Fatal("ReleaseKey released the wrong lock")
	}
	if out, _ := kl.ReleaseKey(ctx, a, la.ID); out.OK {
		t.Fatal("a second ReleaseKey took effect")
	}
	// Expired leases can be neither extended nor released.
	ttl := e.shortTTL()
	lc := acquire(t, e, key(t, "c"), ttl)
	e.expire(time.Now(), ttl)
	if out, _ := kl.ExtendKey(ctx, key(t, "c"), lc.ID, time.Hour); out.OK {
		t.Fatal("ExtendKey resurrected an expired lease")
	}
	if out, _ := kl.ReleaseKey(ctx, key(t, "c"), lc.ID); out.OK {
		t.Fatal("ReleaseKey released an expired lease")
	}
	// Arguments are validated before any I/O.
	_, err = kl.ReleaseKey(ctx, "", lb.ID)
	wantCode(t, "ReleaseKey(empty key)", err, idemkit.CodeInvalidArgument)
	_, err = kl.ExtendKey(ctx, b, "bad id", time.Second)
	wantCode(t, "ExtendKey(bad id)", err, idemkit.CodeInvalidArgument)
	_, err = kl.ExtendKey(ctx, b, lb.ID, 0)
	wantCode(t, "ExtendKey(zero ttl)", err, idemkit.CodeInvalidArgument)
}
