package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

var storeCases = []struct {
	name string
	run  func(t *testing.T, e *Env)
}{
	{"ClaimFreeKeyThenBusy", testClaimFree},
	{"AbsentKey", testAbsent},
	{"CompleteThenReplay", testCompleteReplay},
	{"NotReplayableOutcome", testNotReplayable},
	{"NotReplayableOutcomeKeepsItsResponse", testNotReplayableResponse},
	{"TakeOverReportsTheResponseItReplaced", testTakeOverReplaced},
	{"LeaseBoundary", testLeaseBoundary},
	{"OutcomeExpiryBoundary", testOutcomeExpiry},
	{"StaleHoldersAreRefused", testStaleHolders},
	{"RunOutClaimStillCompletes", testRunOutCompletes},
	{"RunOutClaimIsNotExtended", testRunOutExtends},
	{"RunOutClaimIsNotReleased", testRunOutReleases},
	{"ExtendMovesTheLease", testExtend},
	{"ReleaseFreesTheKey", testRelease},
	{"WrongFencesChangeNothing", testWrongFences},
	{"FencesGrowAcrossRecordExpiry", testFencesAcrossExpiry},
	{"FencesGrowAcrossDelete", testFencesAcrossDelete},
	{"FencesGrowAcrossReleases", testFencesAcrossReleases},
	{clockCase, testClockSteps},
	{"ConcurrentClaimsOnFreeKey", testConcurrentClaimsFree},
	{"ConcurrentClaimsOnRunOutClaim", testConcurrentClaimsRunOut},
	{"ConcurrentFencedWritesOnlyTheHolderLands", testConcurrentFenced},
	{"DeleteLiveClaim", testDeleteClaim},
	{"DeleteOutcome", testDeleteOutcome},
	{"LargeResponses", testClaimLargeResponses},
	{"ResponseTooLargeKeepsTheClaim", testClaimTooLarge},
	{"KeysOfAnyBytes", testClaimKeys},
	{"NoSharedMemory", testClaimNoAliasing},
	{"InvalidArgumentsBeforeIO", testClaimInvalid},
	{"EndedContext", testClaimEndedContext},
	{"TransportFailuresAreCodedErrors", testClaimBroken},
	{"StalledServerGivesCodedErrorsByTheDeadline", testStalled},
	{"RoundTripsPerOperation", testRoundTrips},
	{"NoStateWithoutExpiry", testNoImmortalState},
	{"ListUnderAPrefix", testList},
}

func testClaimFree(t *testing.T, e *Env) {
	k := key(t, "k")
	before := time.Now()
	c, claimed := claim(t, e, k, fp, longTTL)
	if !claimed {
		t.Fatalf("Claim of a free key = %+v, not claimed", c)
	}
	wantFresh(t, e, c, fp, longTTL, before)
	// A duplicate, even with another fingerprint, gets the live claim and
	// writes nothing.
	for range 3 {
		dup, claimed := claim(t, e, k, otherFP, 2*longTTL)
		if claimed {
			t.Fatalf("a second Claim of a claimed key succeeded (fence %v after %v)", dup.Fence, c.Fence)
		}
		wantSameClaim(t, e, "a second Claim", dup, c)
	}
	wantHeld(t, e, "after refused claims", c)
	// The holder's fence still works: the refused claims changed nothing.
	if !complete(t, e, outcome(c, "done"), longTTL) {
		t.Fatal("the holder could not complete after refused claims")
	}
}

func testAbsent(t *testing.T, e *Env) {
	k := key(t, "never")
	if _, ok := get(t, e, k); ok {
		t.Fatal("Get found a record never written")
	}
	if extend(t, e, k, 1, longTTL) {
		t.Fatal("Extend of a key never claimed succeeded")
	}
	if complete(t, e, outcome(store.Record{Key: k, Fingerprint: fp, Fence: 1}, "x"), longTTL) {
		t.Fatal("Complete of a key never claimed succeeded")
	}
	if release(t, e, k, 1) {
		t.Fatal("Release of a key never claimed succeeded")
	}
	if del(t, e, k) {
		t.Fatal("Delete of a key never written reported a deletion")
	}
	if _, ok := get(t, e, k); ok {
		t.Fatal("refused operations on an absent key wrote a record")
	}
	mustClaim(t, e, k, longTTL)
}

func testCompleteReplay(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	const ttl = 24 * time.Hour
	out := outcome(c, `{"order":1}`)
	if !complete(t, e, out, ttl) {
		t.Fatal("the holder's Complete was refused")
	}
	got, ok := get(t, e, k)
	if !ok {
		t.Fatal("Get found nothing after Complete")
	}
	wantOutcome(t, "Get after Complete", got, out, ttl)
	if e.Advance == nil && !near(got.ExpiresAt, time.Now().Add(ttl), 2*time.Second) {
		t.Fatalf("the outcome expires at %v; want about now + %v", got.ExpiresAt, ttl)
	}
	for range 2 {
		rep, claimed := claim(t, e, k, fp, longTTL)
		if claimed {
			t.Fatal("a Claim of a completed key made a new claim")
		}
		wantOutcome(t, "Claim after Complete", rep, out, ttl)
		if !rep.ExpiresAt.Equal(got.ExpiresAt) {
			t.Fatalf("a replaying Claim changed the outcome's expiry: %v, then %v", got.ExpiresAt, rep.ExpiresAt)
		}
	}
	// A completed claim is over: it can be neither completed again, nor
	// extended, nor released.
	if complete(t, e, outcome(c, "again"), ttl) {
		t.Fatal("a second Complete of the same claim succeeded")
	}
	if extend(t, e, k, c.Fence, longTTL) {
		t.Fatal("Extend of a completed claim succeeded")
	}
	if release(t, e, k, c.Fence) {
		t.Fatal("Release of a completed claim succeeded")
	}
	got, _ = get(t, e, k)
	wantOutcome(t, "Get after refused writes", got, out, ttl)
}

func testNotReplayable(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	out := c
	out.State = store.StateNotReplayable
	if !complete(t, e, out, time.Hour) {
		t.Fatal("the holder's Complete was refused")
	}
	for _, read := range []func() (store.Record, bool){
		func() (store.Record, bool) { return get(t, e, k) },
		func() (store.Record, bool) { r, claimed := claim(t, e, k, fp, longTTL); return r, !claimed },
	} {
		got, ok := read()
		if !ok {
			t.Fatal("the not-replayable outcome was not returned")
		}
		wantOutcome(t, "not-replayable outcome", got, out, time.Hour)
		if len(got.Response) != 0 {
			t.Fatalf("a not-replayable outcome came back with a %d-byte response", len(got.Response))
		}
	}
}

// testNotReplayableResponse: a response given with a not-replayable
// outcome is kept and returned as given (Seal keeps its envelope there).
func testNotReplayableResponse(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	out := outcome(c, "the outcome's own bytes")
	out.State = store.StateNotReplayable
	if !complete(t, e, out, time.Hour) {
		t.Fatal("the holder's Complete was refused")
	}
	got, ok := get(t, e, k)
	if !ok {
		t.Fatal("the not-replayable outcome was not returned")
	}
	wantOutcome(t, "not-replayable outcome with a response (Get)", got, out, time.Hour)
	got, claimed := claim(t, e, k, fp, longTTL)
	if claimed {
		t.Fatal("Claim of a not-replayable outcome made a new claim")
	}
	wantOutcome(t, "not-replayable outcome with a response (Claim)", got, out, time.Hour)
}

// testTakeOverReplaced: a new claim that takes over an outcome past its
// expiry reports the outcome's fingerprint and response in Replaced (a
// store with an injected clock that keeps its claims in its records must;
// others may have dropped the outcome at its expiry), and no other Claim
// reports anything: a free key, a busy one, a replay, a run-out claim, a
// released claim and an outcome an operator deleted.
func testTakeOverReplaced(t *testing.T, e *Env) {
	must := e.Advance != nil && !e.OpaqueClaims
	ttl := shortTTL(e)
	noneReplaced := func(what string, r store.Record) {
		t.Helper()
		if r.Replaced != nil {
			t.Fatalf("%s reported a replaced record: %+v", what, *r.Replaced)
		}
	}
	bodies := map[string]string{key(t, "completed"): "the response", key(t, "not-replayable"): "its bytes"}
	for k, body := range bodies {
		c := mustClaim(t, e, k, longTTL)
		noneReplaced("a claim of a free key", c)
		r, _ := claim(t, e, k, otherFP, longTTL)
		noneReplaced("a busy claim", r)
		out := outcome(c, body)
		if strings.HasPrefix(k, key(t, "not")) {
			out.State = store.StateNotReplayable
		}
		if !complete(t, e, out, ttl) {
			t.Fatal("the holder's Complete was refused")
		}
		r, _ = claim(t, e, k, otherFP, longTTL)
		noneReplaced("a replay", r)
	}
	runOut, released, deleted := key(t, "run-out"), key(t, "released"), key(t, "deleted")
	mustClaim(t, e, runOut, ttl)
	c := mustClaim(t, e, released, longTTL)
	if !release(t, e, released, c.Fence) {
		t.Fatal("Release of a held claim reported nothing released")
	}
	c = mustClaim(t, e, deleted, longTTL)
	complete(t, e, outcome(c, "forgotten"), longTTL)
	if !del(t, e, deleted) {
		t.Fatal("Delete of an outcome reported nothing deleted")
	}
	pass(e, ttl)

	for k, body := range bodies {
		r, claimed := claim(t, e, k, otherFP, longTTL)
		if !claimed {
			t.Fatalf("the outcome past its expiry was not taken over: %+v", r)
		}
		if r.Fingerprint != otherFP {
			t.Fatalf("the take-over's claim carries fingerprint %q; want the new claim's", r.Fingerprint)
		}
		switch {
		case r.Replaced == nil && must:
			t.Fatal("the take-over of an outcome past its expiry did not report it")
		case r.Replaced != nil && (r.Replaced.Fingerprint != fp || string(r.Replaced.Response) != body || r.Replaced.Replaced != nil):
			t.Fatalf("the take-over reported %+v; want the replaced outcome's fingerprint and response %q", *r.Replaced, body)
		}
		// Replaced is never written: an outcome completed from the
		// claim that carries it does not carry it.
		if !complete(t, e, outcome(r, "next"), longTTL) {
			t.Fatal("the new claim's Complete was refused")
		}
		got, _ := get(t, e, k)
		noneReplaced("a Get of the next outcome", got)
		// What it replaced is gone: a later take-over reports only what
		// the key held since.
		if !del(t, e, k) {
			t.Fatal("Delete of the next outcome reported nothing deleted")
		}
		r, _ = claim(t, e, k, fp, longTTL)
		noneReplaced("a claim after Delete", r)
	}
	for what, k := range map[string]string{"a take-over of a run-out claim": runOut, "a claim of a released key": released, "a claim after an operator's Delete": deleted} {
		r, claimed := claim(t, e, k, fp, longTTL)
		if !claimed {
			t.Fatalf("%s was refused: %+v", what, r)
		}
		noneReplaced(what, r)
	}
}

func testLeaseBoundary(t *testing.T, e *Env) {
	if e.Advance != nil {
		k := key(t, "k")
		ttl := 10 * time.Second
		c := mustClaim(t, e, k, ttl)
		e.Advance(ttl - time.Millisecond)
		if dup, claimed := claim(t, e, k, fp, ttl); claimed {
			t.Fatalf("the claim was taken over at lease end − 1ms (fence %v)", dup.Fence)
		}
		e.Advance(time.Millisecond)
		next, claimed := claim(t, e, k, fp, ttl)
		if !claimed || next.Fence <= c.Fence {
			t.Fatalf("at its lease's end the claim was not taken over with a greater fence: %+v, %v (old fence %v)", next, claimed, c.Fence)
		}
		return
	}
	ttl := 6 * e.Margin
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatal("the machine was too busy to observe the lease within its margins five times running")
		}
		k := key(t, fmt.Sprint(round))
		t0 := time.Now()
		c := mustClaim(t, e, k, ttl)
		t1 := time.Now()
		time.Sleep(time.Until(t0.Add(ttl - e.Margin)))
		dup, claimed := claim(t, e, k, fp, ttl)
		if time.Now().After(t0.Add(ttl)) {
			continue
		}
		if claimed {
			t.Fatalf("the claim was taken over at lease end − %v (fence %v)", e.Margin, dup.Fence)
		}
		time.Sleep(time.Until(t1.Add(ttl + e.Margin)))
		next, claimed := claim(t, e, k, fp, ttl)
		if !claimed || next.Fence <= c.Fence {
			t.Fatalf("after its lease ran out the claim was not taken over with a greater fence: %+v, %v (old fence %v)", next, claimed, c.Fence)
		}
		return
	}
}

func testOutcomeExpiry(t *testing.T, e *Env) {
	k := key(t, "k")
	if e.Advance != nil {
		ttl := 10 * time.Second
		c := mustClaim(t, e, k, time.Second)
		complete(t, e, outcome(c, "x"), ttl)
		e.Advance(ttl - time.Millisecond)
		if _, ok := get(t, e, k); !ok {
			t.Fatal("outcome gone at expiry − 1ms")
		}
		if _, claimed := claim(t, e, k, fp, time.Second); claimed {
			t.Fatal("a Claim at expiry − 1ms replaced the outcome")
		}
		e.Advance(time.Millisecond)
		if _, ok := get(t, e, k); ok {
			t.Fatal("outcome visible at its expiry instant")
		}
		next := mustClaim(t, e, k, time.Second)
		if next.Fence <= c.Fence {
			t.Fatalf("the claim after the outcome expired has fence %v, not above %v", next.Fence, c.Fence)
		}
		return
	}
	ttl := 6 * e.Margin
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatal("the machine was too busy to observe the outcome within its margins five times running")
		}
		k := key(t, fmt.Sprint(round))
		c := mustClaim(t, e, k, longTTL)
		t0 := time.Now()
		complete(t, e, outcome(c, "x"), ttl)
		t1 := time.Now()
		time.Sleep(time.Until(t0.Add(ttl - e.Margin)))
		_, ok := get(t, e, k)
		if time.Now().After(t0.Add(ttl)) {
			continue
		}
		if !ok {
			t.Fatalf("outcome gone at expiry − %v", e.Margin)
		}
		time.Sleep(time.Until(t1.Add(ttl + e.Margin)))
		if _, ok := get(t, e, k); ok {
			t.Fatalf("outcome visible at expiry + %v", e.Margin)
		}
		next := mustClaim(t, e, k, longTTL)
		if next.Fence <= c.Fence {
			t.Fatalf("the claim after the outcome expired has fence %v, not above %v", next.Fence, c.Fence)
		}
		return
	}
}

func testStaleHolders(t *testing.T, e *Env) {
	k := key(t, "k")
	ttl := shortTTL(e)
	stale := mustClaim(t, e, k, ttl)
	pass(e, ttl)
	fresh, claimed := claim(t, e, k, otherFP, longTTL)
	if !claimed {
		t.Fatalf("a Claim after the lease ran out was refused: %+v", fresh)
	}
	if fresh.Fence <= stale.Fence || fresh.Fingerprint != otherFP {
		t.Fatalf("the new claim %+v; want a fence above %v and its own fingerprint", fresh, stale.Fence)
	}
	if complete(t, e, outcome(stale, "stale"), longTTL) {
		t.Fatal("the stale holder's Complete succeeded after the key was claimed again")
	}
	if extend(t, e, k, stale.Fence, longTTL) {
		t.Fatal("the stale holder's Extend succeeded after the key was claimed again")
	}
	if release(t, e, k, stale.Fence) {
		t.Fatal("the stale holder's Release succeeded after the key was claimed again")
	}
	wantHeld(t, e, "the new claim after the stale holder's writes", fresh)
	out := outcome(fresh, "fresh")
	if !complete(t, e, out, longTTL) {
		t.Fatal("the new holder could not complete")
	}
	if complete(t, e, outcome(stale, "stale"), longTTL) {
		t.Fatal("the stale holder's Complete succeeded over the new holder's outcome")
	}
	got, _ := get(t, e, k)
	wantOutcome(t, "after the stale holder's writes", got, out, longTTL)
}

func testRunOutCompletes(t *testing.T, e *Env) {
	k := key(t, "k")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, ttl)
	pass(e, ttl)
	out := outcome(c, "slow")
	if !complete(t, e, out, longTTL) {
		t.Fatal("a claim whose lease ran out, with nobody claiming since, could not complete")
	}
	rep, claimed := claim(t, e, k, fp, longTTL)
	if claimed {
		t.Fatal("the key was claimed again after a late Complete")
	}
	wantOutcome(t, "Claim after a late Complete", rep, out, longTTL)
}

// A claim whose lease ran out is free for anyone: it can no longer be
// extended (that would take back a key others may already have judged
// free) or released, though it still completes while nobody claimed since.
func testRunOutExtends(t *testing.T, e *Env) {
	k := key(t, "k")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, ttl)
	pass(e, ttl)
	if extend(t, e, k, c.Fence, longTTL) {
		t.Fatal("a claim whose lease ran out was extended")
	}
	out := outcome(c, "late")
	if !complete(t, e, out, longTTL) {
		t.Fatal("a run-out claim whose Extend was refused, with nobody claiming since, could not complete")
	}
	got, _ := get(t, e, k)
	wantOutcome(t, "after a refused Extend and a late Complete", got, out, longTTL)
}

func testRunOutReleases(t *testing.T, e *Env) {
	k := key(t, "k")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, ttl)
	pass(e, ttl)
	if release(t, e, k, c.Fence) {
		t.Fatal("a claim whose lease ran out was released")
	}
	next, claimed := claim(t, e, k, otherFP, longTTL)
	if !claimed || next.Fence <= c.Fence {
		t.Fatalf("the run-out claim was not taken over with a greater fence: %+v, %v", next, claimed)
	}
	if complete(t, e, outcome(c, "x"), longTTL) {
		t.Fatal("the taken-over claim could still complete")
	}
}

func testExtend(t *testing.T, e *Env) {
	k := key(t, "k")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, ttl)
	until, ok, err := e.Store.Extend(t.Context(), k, c.Fence, longTTL)
	if err != nil || !ok {
		t.Fatalf("the holder's Extend was refused: %v, %v", ok, err)
	}
	if !e.OpaqueClaims {
		got, _ := get(t, e, k)
		if got.Fence != c.Fence || !got.ExpiresAt.After(c.ExpiresAt.Add(longTTL/2)) {
			t.Fatalf("after Extend the claim is %+v; want fence %v and a lease of about %v", got, c.Fence, longTTL)
		}
		if !got.ExpiresAt.Equal(until) {
			t.Fatalf("Extend returned the expiry %v; Get reads %v", until, got.ExpiresAt)
		}
		c.ExpiresAt = got.ExpiresAt
	}
	pass(e, ttl)
	wantHeld(t, e, "past the original lease, after Extend", c)
	// A shorter TTL shortens the lease.
	if !extend(t, e, k, c.Fence, ttl) {
		t.Fatal("the holder's second Extend was refused")
	}
	pass(e, ttl)
	next, claimed := claim(t, e, k, otherFP, longTTL)
	if !claimed || next.Fence <= c.Fence {
		t.Fatalf("after a shortening Extend ran out the key was not claimable with a greater fence: %+v, %v", next, claimed)
	}
}

func testRelease(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	if !release(t, e, k, c.Fence) {
		t.Fatal("the holder's Release was refused")
	}
	if got, ok := get(t, e, k); ok {
		t.Fatalf("Get found %+v after Release", got)
	}
	if release(t, e, k, c.Fence) {
		t.Fatal("a second Release of the same claim succeeded")
	}
	if extend(t, e, k, c.Fence, longTTL) || complete(t, e, outcome(c, "x"), longTTL) {
		t.Fatal("a released claim could still be extended or completed")
	}
	next, claimed := claim(t, e, k, otherFP, longTTL)
	if !claimed || next.Fence <= c.Fence {
		t.Fatalf("after Release the key was not claimable at once with a greater fence: %+v, %v (old %v)", next, claimed, c.Fence)
	}
	if release(t, e, k, c.Fence) {
		t.Fatal("the released claim's Release succeeded against the new claim")
	}
	wantHeld(t, e, "the new claim", next)
}

func testWrongFences(t *testing.T, e *Env) {
	k := key(t, "k")
	// Make the claim's fence above 1 so that a lower fence exists.
	first := mustClaim(t, e, k, longTTL)
	release(t, e, k, first.Fence)
	c := mustClaim(t, e, k, longTTL)
	for _, f := range []idemkit.Fence{c.Fence - 1, c.Fence + 1, c.Fence + 1000, first.Fence} {
		if f == 0 || f == c.Fence {
			continue
		}
		if extend(t, e, k, f, 2*longTTL) {
			t.Fatalf("Extend with fence %v succeeded on the claim with fence %v", f, c.Fence)
		}
		w := outcome(c, "wrong")
		w.Fence = f
		if complete(t, e, w, longTTL) {
			t.Fatalf("Complete with fence %v succeeded on the claim with fence %v", f, c.Fence)
		}
		if release(t, e, k, f) {
			t.Fatalf("Release with fence %v succeeded on the claim with fence %v", f, c.Fence)
		}
	}
	wantHeld(t, e, "after writes with wrong fences", c)
	out := outcome(c, "right")
	if !complete(t, e, out, longTTL) {
		t.Fatal("the holder could not complete after writes with wrong fences")
	}
	got, _ := get(t, e, k)
	wantOutcome(t, "after writes with wrong fences", got, out, longTTL)
}

func testFencesAcrossExpiry(t *testing.T, e *Env) {
	k := key(t, "k")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, longTTL)
	complete(t, e, outcome(c, "x"), ttl)
	pass(e, ttl)
	next := mustClaim(t, e, k, ttl)
	if next.Fence <= c.Fence {
		t.Fatalf("the claim after the outcome expired has fence %v, not above %v", next.Fence, c.Fence)
	}
	if e.Advance == nil {
		return
	}
	// Long after a run-out claim could have been removed.
	e.Advance(ttl + store.ClaimRetention + 24*time.Hour)
	last := mustClaim(t, e, k, ttl)
	if last.Fence <= next.Fence {
		t.Fatalf("the claim a day after a run-out claim has fence %v, not above %v", last.Fence, next.Fence)
	}
}

func testFencesAcrossDelete(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	complete(t, e, outcome(c, "x"), longTTL)
	if !del(t, e, k) {
		t.Fatal("Delete of an outcome reported nothing deleted")
	}
	next := mustClaim(t, e, k, longTTL)
	if next.Fence <= c.Fence {
		t.Fatalf("the claim after Delete of an outcome has fence %v, not above %v", next.Fence, c.Fence)
	}
	if !del(t, e, k) {
		t.Fatal("Delete of a live claim reported nothing deleted")
	}
	last := mustClaim(t, e, k, longTTL)
	if last.Fence <= next.Fence {
		t.Fatalf("the claim after Delete of a claim has fence %v, not above %v", last.Fence, next.Fence)
	}
}

func testFencesAcrossReleases(t *testing.T, e *Env) {
	k := key(t, "k")
	var prev idemkit.Fence
	for i := range 50 {
		c := mustClaim(t, e, k, longTTL)
		if c.Fence <= prev {
			t.Fatalf("cycle %d: fence %v after %v", i, c.Fence, prev)
		}
		prev = c.Fence
		if !release(t, e, k, c.Fence) {
			t.Fatalf("cycle %d: Release refused", i)
		}
	}
}

// race runs n goroutines of f at once and waits for them.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// raceClaims makes 16 concurrent claims of k and returns the winner,
// failing unless exactly one claimed and every other saw the winner's
// claim.
func raceClaims(t *testing.T, e *Env, k string) store.Record {
	t.Helper()
	const n = 16
	recs := make([]store.Record, n)
	won := make([]bool, n)
	errs := make([]error, n)
	race(n, func(i int) {
		recs[i], won[i], errs[i] = e.Store.Claim(t.Context(), k, fmt.Sprint("fp-", i), longTTL)
	})
	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent Claim: %v", errs[i])
		}
		if won[i] {
			if winner >= 0 {
				t.Fatalf("two concurrent Claims both claimed the key (fences %v and %v)", recs[winner].Fence, recs[i].Fence)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("none of the concurrent Claims of a claimable key claimed it")
	}
	w := recs[winner]
	if w.Fingerprint != fmt.Sprint("fp-", winner) {
		t.Fatalf("the winning claim carries fingerprint %q; want its own", w.Fingerprint)
	}
	for i := range n {
		if i != winner {
			wantSameClaim(t, e, "a losing concurrent Claim", recs[i], w)
		}
	}
	return w
}

func testConcurrentClaimsFree(t *testing.T, e *Env) {
	for round := range 5 {
		raceClaims(t, e, key(t, fmt.Sprint(round)))
	}
}

func testConcurrentClaimsRunOut(t *testing.T, e *Env) {
	ttl := shortTTL(e)
	olds := make([]store.Record, 5)
	for round := range olds {
		olds[round] = mustClaim(t, e, key(t, fmt.Sprint(round)), ttl)
	}
	pass(e, ttl)
	for round, old := range olds {
		w := raceClaims(t, e, key(t, fmt.Sprint(round)))
		if w.Fence <= old.Fence {
			t.Fatalf("the claim that took over has fence %v, not above the run-out claim's %v", w.Fence, old.Fence)
		}
	}
}

func testConcurrentFenced(t *testing.T, e *Env) {
	const n = 16
	// wrong returns the i-th wrong fence for the claim c.
	wrong := func(c store.Record, i int) idemkit.Fence {
		if i%4 == 3 && c.Fence > idemkit.Fence(i) {
			return c.Fence - idemkit.Fence(i)
		}
		return c.Fence + idemkit.Fence(i)
	}
	for _, holderCompletes := range []bool{true, false} {
		k := key(t, fmt.Sprint("holder-completes-", holderCompletes))
		c := mustClaim(t, e, k, longTTL)
		out := outcome(c, "the holder's")
		var landed atomic.Int32
		errs := make([]error, n+1)
		race(n+1, func(i int) {
			var ok bool
			var err error
			switch {
			case i == 0 && holderCompletes:
				ok, err = e.Store.Complete(t.Context(), out, longTTL)
			case i == 0:
				ok, err = e.Store.Release(t.Context(), k, c.Fence)
			case i == n:
				// The holder's own renewal, racing its completion: it may
				// land or not, but never undo the completion.
				_, _, err = e.Store.Extend(t.Context(), k, c.Fence, longTTL)
				errs[i] = err
				return
			case i%2 == 0:
				w := outcome(c, fmt.Sprint("fence ", wrong(c, i)))
				w.Fence = wrong(c, i)
				ok, err = e.Store.Complete(t.Context(), w, longTTL)
			default:
				ok, err = e.Store.Release(t.Context(), k, wrong(c, i))
			}
			errs[i] = err
			if ok {
				landed.Add(1)
				if i != 0 {
					errs[i] = fmt.Errorf("the write with wrong fence %v landed", wrong(c, i))
				}
			}
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if landed.Load() != 1 {
			t.Fatalf("%d fenced writes landed; want the holder's alone", landed.Load())
		}
		got, ok := get(t, e, k)
		if holderCompletes {
			if !ok {
				t.Fatal("the holder's outcome is gone")
			}
			wantOutcome(t, "after racing fenced writes", got, out, longTTL)
			continue
		}
		if ok {
			t.Fatalf("after the holder's Release the key holds %+v", got)
		}
		if next := mustClaim(t, e, k, longTTL); next.Fence <= c.Fence {
			t.Fatalf("after the holder's Release the new claim has fence %v, not above %v", next.Fence, c.Fence)
		}
	}
}

func testDeleteClaim(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	if !del(t, e, k) {
		t.Fatal("Delete of a live claim reported nothing deleted")
	}
	if got, ok := get(t, e, k); ok {
		t.Fatalf("Get found %+v after Delete", got)
	}
	if extend(t, e, k, c.Fence, longTTL) {
		t.Fatal("a deleted claim could be extended")
	}
	if complete(t, e, outcome(c, "x"), longTTL) {
		t.Fatal("a deleted claim could be completed")
	}
	if release(t, e, k, c.Fence) {
		t.Fatal("a deleted claim could be released")
	}
	if got, ok := get(t, e, k); ok {
		t.Fatalf("a deleted claim's writes left %+v", got)
	}
	if del(t, e, k) {
		t.Fatal("a second Delete reported a deletion")
	}
	next := mustClaim(t, e, k, longTTL)
	if next.Fence <= c.Fence {
		t.Fatalf("the claim after Delete has fence %v, not above %v", next.Fence, c.Fence)
	}
}

func testDeleteOutcome(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	complete(t, e, outcome(c, "x"), longTTL)
	if !del(t, e, k) {
		t.Fatal("Delete of an outcome reported nothing deleted")
	}
	if got, ok := get(t, e, k); ok {
		t.Fatalf("Get found %+v after Delete", got)
	}
	if del(t, e, k) {
		t.Fatal("a second Delete reported a deletion")
	}
	if complete(t, e, outcome(c, "again"), longTTL) {
		t.Fatal("the completed claim could complete again after Delete")
	}
	if _, claimed := claim(t, e, k, fp, longTTL); !claimed {
		t.Fatal("the key was not claimable after Delete of its outcome")
	}
}

func testClaimLargeResponses(t *testing.T, e *Env) {
	for _, size := range []int{0, 1, 64 << 10, 900 << 10} {
		if e.MaxResponseBytes > 0 && size > e.MaxResponseBytes {
			continue
		}
		k := key(t, fmt.Sprint(size))
		body := make([]byte, size)
		_, _ = rand.Read(body)
		c := mustClaim(t, e, k, longTTL)
		c.State, c.Response = store.StateCompleted, body
		if !complete(t, e, c, longTTL) {
			t.Fatalf("Complete with a %d-byte response was refused", size)
		}
		got, ok := get(t, e, k)
		if !ok || !bytes.Equal(got.Response, body) {
			t.Fatalf("a %d-byte response did not round-trip through Get (found %v, %d bytes)", size, ok, len(got.Response))
		}
		rep, claimed := claim(t, e, k, fp, longTTL)
		if claimed || !bytes.Equal(rep.Response, body) {
			t.Fatalf("a %d-byte response did not round-trip through Claim (claimed %v, %d bytes)", size, claimed, len(rep.Response))
		}
	}
}

func testClaimTooLarge(t *testing.T, e *Env) {
	if e.MaxResponseBytes <= 0 {
		t.Skip("the store declares no response limit within the suite's sizes (Env.MaxResponseBytes is 0)")
	}
	for _, thenRelease := range []bool{false, true} {
		k := key(t, fmt.Sprint("release-", thenRelease))
		c := mustClaim(t, e, k, longTTL)
		big := c
		big.State, big.Response = store.StateCompleted, make([]byte, e.MaxResponseBytes+1)
		ok, err := e.Store.Complete(t.Context(), big, longTTL)
		if ok || !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("Complete with %d bytes = %v, %v; want an InvalidArgument error matching store.ErrTooLarge", len(big.Response), ok, err)
		}
		wantHeld(t, e, "after a refused oversized Complete", c)
		if thenRelease {
			if !release(t, e, k, c.Fence) {
				t.Fatal("the claim could not be released after a refused oversized Complete")
			}
			continue
		}
		fits := big
		fits.Response = fits.Response[:e.MaxResponseBytes]
		if !complete(t, e, fits, longTTL) {
			t.Fatal("a response of exactly the limit was refused")
		}
		if got, _ := get(t, e, k); len(got.Response) != e.MaxResponseBytes {
			t.Fatalf("the outcome holds %d bytes; want %d", len(got.Response), e.MaxResponseBytes)
		}
	}
}

func testClaimKeys(t *testing.T, e *Env) {
	keys := anyKeys(t)
	claims := make([]store.Record, len(keys))
	for i, k := range keys {
		claims[i] = mustClaim(t, e, k, longTTL)
	}
	for i, c := range claims {
		if !complete(t, e, outcome(c, fmt.Sprint("value ", i)), longTTL) {
			t.Fatalf("key %q: the holder's Complete was refused", keys[i])
		}
	}
	for i, k := range keys {
		got, ok := get(t, e, k)
		if !ok || string(got.Response) != fmt.Sprint("value ", i) || got.Fence != claims[i].Fence {
			t.Fatalf("key %q: got %+v, %v; each key must hold its own record", k, got, ok)
		}
	}
	// Composed and decomposed spellings are different record keys: a store
	// does not normalise (the guard hands it exact keys).
	if got, _ := get(t, e, keys[decomposedIndex]); string(got.Response) != fmt.Sprint("value ", decomposedIndex) {
		t.Fatalf("the decomposed key returned %q", got.Response)
	}
	if got, _ := get(t, e, keys[composedIndex]); string(got.Response) != fmt.Sprint("value ", composedIndex) {
		t.Fatalf("the composed key returned %q", got.Response)
	}
	for _, k := range keys[:4] {
		if !del(t, e, k) {
			t.Fatalf("key %q: Delete found nothing", k)
		}
	}
	for i, k := range keys[4:] {
		if got, ok := get(t, e, k); !ok || string(got.Response) != fmt.Sprint("value ", i+4) {
			t.Fatalf("key %q: deleting other keys changed its record: %+v, %v", k, got, ok)
		}
	}
}

func testClaimNoAliasing(t *testing.T, e *Env) {
	k := key(t, "k")
	c := mustClaim(t, e, k, longTTL)
	out := outcome(c, "original")
	complete(t, e, out, longTTL)
	out.Response[0] = 'X'
	got, _ := get(t, e, k)
	if string(got.Response) != "original" {
		t.Fatalf("changing the caller's slice after Complete changed the record: %q", got.Response)
	}
	got.Response[0] = 'Y'
	rep, _ := claim(t, e, k, fp, longTTL)
	if string(rep.Response) != "original" {
		t.Fatalf("changing a slice Get returned changed the record: %q", rep.Response)
	}
	rep.Response[0] = 'Z'
	again, _ := get(t, e, k)
	if string(again.Response) != "original" {
		t.Fatalf("changing a slice Claim returned changed the record: %q", again.Response)
	}
}

func testClaimInvalid(t *testing.T, e *Env) {
	ctx := t.Context()
	long := strings.Repeat("x", store.MaxKeyBytes+1)
	k := key(t, "k")
	valid := outcome(store.Record{Key: k, Fingerprint: fp, Fence: 1}, "x")
	check := func(phase string) {
		t.Helper()
		want := func(what string, err error) {
			t.Helper()
			wantCode(t, phase+" "+what, err, idemkit.CodeInvalidArgument)
			if strings.Contains(err.Error(), long[:40]) {
				t.Fatalf("%s %s: the error message repeats the key", phase, what)
			}
		}
		for _, c := range []struct {
			name string
			key  string
			ttl  time.Duration
		}{
			{"empty key", "", time.Minute},
			{"long key", long, time.Minute},
			{"zero ttl", k, 0},
			{"negative ttl", k, -time.Second},
			{"sub-millisecond ttl", k, time.Microsecond},
		} {
			_, _, err := e.Store.Claim(ctx, c.key, fp, c.ttl)
			want("Claim("+c.name+")", err)
			_, _, err = e.Store.Extend(ctx, c.key, 1, c.ttl)
			want("Extend("+c.name+")", err)
		}
		_, _, err := e.Store.Extend(ctx, k, 0, time.Minute)
		want("Extend(zero fence)", err)
		for _, c := range []struct {
			name string
			key  string
			f    idemkit.Fence
		}{{"empty key", "", 1}, {"long key", long, 1}, {"zero fence", k, 0}} {
			_, err := e.Store.Release(ctx, c.key, c.f)
			want("Release("+c.name+")", err)
		}
		mod := func(f func(r *store.Record)) store.Record { r := valid; f(&r); return r }
		for _, c := range []struct {
			name string
			rec  store.Record
			ttl  time.Duration
		}{
			{"empty key", mod(func(r *store.Record) { r.Key = "" }), time.Minute},
			{"long key", mod(func(r *store.Record) { r.Key = long }), time.Minute},
			{"zero fence", mod(func(r *store.Record) { r.Fence = 0 }), time.Minute},
			{"zero state", mod(func(r *store.Record) { r.State = 0 }), time.Minute},
			{"claimed state", mod(func(r *store.Record) { r.State = store.StateClaimed }), time.Minute},
			{"unknown state", mod(func(r *store.Record) { r.State = 9 }), time.Minute},
			{"zero ttl", valid, 0},
			{"sub-millisecond ttl", valid, time.Microsecond},
		} {
			_, err := e.Store.Complete(ctx, c.rec, c.ttl)
			want("Complete("+c.name+")", err)
		}
		for _, kk := range []string{"", long} {
			_, _, err := e.Store.Get(ctx, kk)
			want("Get", err)
			_, err = e.Store.Delete(ctx, kk)
			want("Delete", err)
		}
	}
	check("live:")
	if _, ok := get(t, e, k); ok {
		t.Fatal("an invalid call wrote a record")
	}
	e.Break()
	check("broken backend:") // validation comes before any I/O
}

func testClaimEndedContext(t *testing.T, e *Env) {
	free := key(t, "free")
	held := key(t, "held")
	c := mustClaim(t, e, held, longTTL)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, x := range []struct {
		ctx  context.Context
		code idemkit.Code
	}{{canceled, idemkit.CodeAborted}, {expired, idemkit.CodeNetworkTimeout}} {
		_, _, err := e.Store.Claim(x.ctx, free, fp, longTTL)
		wantCode(t, "Claim", err, x.code)
		_, _, err = e.Store.Get(x.ctx, held)
		wantCode(t, "Get", err, x.code)
		_, _, err = e.Store.Extend(x.ctx, held, c.Fence, 2*longTTL)
		wantCode(t, "Extend", err, x.code)
		_, err = e.Store.Complete(x.ctx, outcome(c, "x"), longTTL)
		wantCode(t, "Complete", err, x.code)
		_, err = e.Store.Release(x.ctx, held, c.Fence)
		wantCode(t, "Release", err, x.code)
		_, err = e.Store.Delete(x.ctx, held)
		wantCode(t, "Delete", err, x.code)
	}
	if got, ok := get(t, e, free); ok {
		t.Fatalf("a Claim with an ended ctx wrote %+v", got)
	}
	wantHeld(t, e, "after operations with an ended ctx", c)
	if !complete(t, e, outcome(c, "y"), longTTL) {
		t.Fatal("the holder could not complete after operations with an ended ctx")
	}
}

func testClaimBroken(t *testing.T, e *Env) {
	k := key(t, "secret-key")
	c := mustClaim(t, e, k, longTTL)
	e.Break()
	ctx := t.Context()
	_, _, err := e.Store.Claim(ctx, k, fp, longTTL)
	wantUnavailable(t, "Claim", err, "secret-key")
	_, _, err = e.Store.Claim(ctx, key(t, "secret-key-2"), fp, longTTL)
	wantUnavailable(t, "Claim of a free key", err, "secret-key")
	_, _, err = e.Store.Get(ctx, k)
	wantUnavailable(t, "Get", err, "secret-key")
	_, _, err = e.Store.Extend(ctx, k, c.Fence, longTTL)
	wantUnavailable(t, "Extend", err, "secret-key")
	_, err = e.Store.Complete(ctx, outcome(c, "x"), longTTL)
	wantUnavailable(t, "Complete", err, "secret-key")
	_, err = e.Store.Release(ctx, k, c.Fence)
	wantUnavailable(t, "Release", err, "secret-key")
	_, err = e.Store.Delete(ctx, k)
	wantUnavailable(t, "Delete", err, "secret-key")
}

func testStalled(t *testing.T, e *Env) {
	if e.Stall == nil {
		t.Skip("the Env cannot stall its server (Env.Stall is nil)")
	}
	// One claim per operation, so that operations queued on the stalled
	// server and run when it resumes do not disturb each other.
	const deadline = time.Second
	claims := make([]store.Record, 4)
	for i := range claims {
		claims[i] = mustClaim(t, e, key(t, fmt.Sprint("held-", i)), longTTL)
	}
	ops := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"Claim", func(ctx context.Context) error {
			_, _, err := e.Store.Claim(ctx, key(t, "free"), fp, longTTL)
			return err
		}},
		{"Get", func(ctx context.Context) error { _, _, err := e.Store.Get(ctx, claims[0].Key); return err }},
		{"Extend", func(ctx context.Context) error {
			_, _, err := e.Store.Extend(ctx, claims[0].Key, claims[0].Fence, longTTL)
			return err
		}},
		{"Complete", func(ctx context.Context) error {
			_, err := e.Store.Complete(ctx, outcome(claims[1], "x"), longTTL)
			return err
		}},
		{"Release", func(ctx context.Context) error {
			_, err := e.Store.Release(ctx, claims[2].Key, claims[2].Fence)
			return err
		}},
		{"Delete", func(ctx context.Context) error { _, err := e.Store.Delete(ctx, claims[3].Key); return err }},
	}
	resume := e.Stall()
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	errs := make([]error, len(ops))
	took := make([]time.Duration, len(ops))
	race(len(ops), func(i int) {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		t0 := time.Now()
		errs[i] = ops[i].do(ctx)
		took[i] = time.Since(t0)
	})
	resumed = true
	resume()
	for i, op := range ops {
		if took[i] > deadline+3*time.Second {
			t.Errorf("%s on a stalled server took %v with a %v deadline", op.name, took[i], deadline)
		}
		if errs[i] == nil {
			t.Errorf("%s on a stalled server returned no error", op.name)
			continue
		}
		if c := idemkit.CodeOf(errs[i]); c != idemkit.CodeNetworkTimeout && c != idemkit.CodeServiceUnavailable {
			t.Errorf("%s on a stalled server: code %v (%v); want NetworkTimeout or ServiceUnavailable", op.name, c, errs[i])
		}
	}
	if t.Failed() {
		return
	}
	// The store works again once the server is back.
	var c store.Record
	var claimed bool
	var err error
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		c, claimed, err = e.Store.Claim(ctx, key(t, "after"), fp, longTTL)
		cancel()
		if err == nil || try == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !claimed {
		t.Fatalf("Claim after the server resumed = %v, %v", claimed, err)
	}
	out := outcome(c, "after")
	if !complete(t, e, out, longTTL) {
		t.Fatal("Complete after the server resumed was refused")
	}
	got, _ := get(t, e, c.Key)
	wantOutcome(t, "after the server resumed", got, out, longTTL)
}

func testRoundTrips(t *testing.T, e *Env) {
	if e.RoundTrips == nil {
		t.Skip("the Env does not count round trips (Env.RoundTrips is nil)")
	}
	limit := func(n, def int) int {
		if n > 0 {
			return n
		}
		return def
	}
	m := e.MaxRoundTrips
	cost := func(what string, max int, f func()) {
		t.Helper()
		before := e.RoundTrips()
		f()
		n := e.RoundTrips() - before
		t.Logf("%s: %d round trip(s)", what, n)
		if n < 1 || n > max {
			t.Errorf("%s took %d round trips; want 1 to %d", what, n, max)
		}
	}
	k := key(t, "k")
	var c store.Record
	cost("Claim of a free key", limit(m.Claim, 1), func() { c = mustClaim(t, e, k, longTTL) })
	cost("Claim of a busy key", limit(m.Busy, 1), func() { claim(t, e, k, otherFP, longTTL) })
	cost("Extend", limit(m.Extend, 1), func() {
		if !extend(t, e, k, c.Fence, longTTL) {
			t.Fatal("Extend refused")
		}
	})
	cost("Complete", limit(m.Complete, 1), func() {
		if !complete(t, e, outcome(c, "x"), longTTL) {
			t.Fatal("Complete refused")
		}
	})
	cost("Claim that replays", limit(m.Replay, 1), func() {
		if _, claimed := claim(t, e, k, fp, longTTL); claimed {
			t.Fatal("claimed a completed key")
		}
	})
	cost("Get", limit(m.Get, 1), func() {
		if _, ok := get(t, e, k); !ok {
			t.Fatal("Get found nothing")
		}
	})
	cost("Delete", limit(m.Delete, 1), func() {
		if !del(t, e, k) {
			t.Fatal("Delete found nothing")
		}
	})
	r := mustClaim(t, e, key(t, "r"), longTTL)
	cost("Release", limit(m.Release, 1), func() {
		if !release(t, e, r.Key, r.Fence) {
			t.Fatal("Release refused")
		}
	})
	ttl := shortTTL(e)
	mustClaim(t, e, key(t, "over"), ttl)
	pass(e, ttl)
	cost("Claim that takes over a run-out claim", limit(m.TakeOver, 3), func() { mustClaim(t, e, key(t, "over"), longTTL) })
}

func testNoImmortalState(t *testing.T, e *Env) {
	if e.Keys == nil {
		t.Skip("the Env cannot list what its backend holds (Env.Keys is nil)")
	}
	ttl := shortTTL(e)
	for i := range 24 {
		k := key(t, fmt.Sprint(i))
		c := mustClaim(t, e, k, ttl)
		switch i % 6 {
		case 0:
			complete(t, e, outcome(c, "x"), longTTL)
		case 1:
			release(t, e, k, c.Fence)
		case 2:
			del(t, e, k)
		case 3:
			c.State = store.StateNotReplayable
			complete(t, e, c, longTTL)
			del(t, e, k)
		case 4:
			extend(t, e, k, c.Fence, longTTL)
		}
	}
	pass(e, ttl)
	for i := range 4 {
		// Take over the run-out claims.
		mustClaim(t, e, key(t, fmt.Sprint(i*6+5)), ttl)
	}
	keys, err := e.Keys(t.Context())
	if err != nil {
		t.Fatalf("Keys: %v", err)
	}
	if len(keys) > 0 {
		t.Fatalf("the backend holds %d keys with no expiry (first: %q)", len(keys), keys[0])
	}
}
