package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// RecordsEnv is one fresh [store.Records], built by a [RecordsFactory] for
// one test.
type RecordsEnv struct {
	// Records is the record store under test, empty. Required.
	Records store.Records

	// Advance moves the store's clock forward by d. Set it when the clock
	// can be injected; leave it nil for a real clock, and the suite sleeps
	// with TTLs scaled by Margin.
	Advance func(d time.Duration)

	// Margin is the ε of real-clock tests: more than one round trip to the
	// backend. Default: 50 ms. Unused when Advance is set.
	Margin time.Duration

	// Break makes the backend unreachable for this Env's Records (close
	// its client), so the suite can check that transport failures surface
	// as coded errors. Required.
	Break func()

	// MaxResponseBytes is the largest response the store holds, if it has a
	// limit (0: none within the suite's sizes). The suite then checks that
	// a larger one is refused with store.ErrTooLarge.
	MaxResponseBytes int
}

// RecordsFactory builds a fresh, empty [RecordsEnv] for one test, isolated
// from every other, and registers its cleanup with t.Cleanup.
type RecordsFactory func(t *testing.T) *RecordsEnv

// RunRecords runs the conformance suite of [store.Records] against the
// record stores f builds: round trips, expiry at and around its boundary,
// fenced puts (including concurrent puts with different fences, which must
// leave the highest), large responses, keys of any bytes, deletion,
// argument validation before I/O, ended contexts and transport failures.
// Each case runs in parallel on its own RecordsEnv.
func RunRecords(t *testing.T, f RecordsFactory) {
	t.Helper()
	for _, c := range recordsCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := f(t)
			if e == nil || e.Records == nil || e.Break == nil {
				t.Fatal("storetest: the factory returned a RecordsEnv without Records or Break")
			}
			if e.Margin <= 0 {
				e.Margin = 50 * time.Millisecond
			}
			c.run(t, e)
		})
	}
}

var recordsCases = []struct {
	name string
	run  func(t *testing.T, e *RecordsEnv)
}{
	{"RoundTrip", testRecordsRoundTrip},
	{"GetMissing", testRecordsGetMissing},
	{"ExpiryBoundary", testRecordsExpiry},
	{"FencedPut", testRecordsFencedPut},
	{"PutOverExpiredRecordIgnoresItsFence", testRecordsPutOverExpired},
	{"ConcurrentPutsLeaveHighestFence", testRecordsConcurrentPuts},
	{"LargeResponses", testRecordsLargeResponses},
	{"ResponseTooLarge", testRecordsTooLarge},
	{"KeysOfAnyBytes", testRecordsKeys},
	{"Delete", testRecordsDelete},
	{"NoSharedMemory", testRecordsNoAliasing},
	{"InvalidArgumentsBeforeIO", testRecordsInvalid},
	{"EndedContext", testRecordsEndedContext},
	{"TransportFailuresAreCodedErrors", testRecordsBroken},
}

func record(k string, fence idemkit.Fence, response string) store.Record {
	return store.Record{
		Key:         k,
		Fingerprint: "test-v1:" + strings.Repeat("ab", 32),
		State:       store.StateCompleted,
		Response:    []byte(response),
		Fence:       fence,
	}
}

func put(t *testing.T, e *RecordsEnv, r store.Record, ttl time.Duration) bool {
	t.Helper()
	ok, err := e.Records.Put(t.Context(), r, ttl)
	if err != nil {
		t.Fatalf("Put: unexpected error: %v", err)
	}
	return ok
}

func getRecord(t *testing.T, e *RecordsEnv, k string) (store.Record, bool) {
	t.Helper()
	r, ok, err := e.Records.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get: unexpected error: %v", err)
	}
	if ok && r.Key != k {
		t.Fatalf("Get(%q) returned the record of %q", k, r.Key)
	}
	return r, ok
}

func testRecordsRoundTrip(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	in := record(k, 7, `{"order":1}`)
	in.State = store.StateCompleted
	before := time.Now()
	if !put(t, e, in, time.Minute) {
		t.Fatal("Put into an empty store was refused")
	}
	got, ok := getRecord(t, e, k)
	if !ok {
		t.Fatal("Get found nothing after Put")
	}
	if got.Fingerprint != in.Fingerprint || got.State != in.State || !bytes.Equal(got.Response, in.Response) || got.Fence != in.Fence {
		t.Fatalf("round trip changed the record: got %+v, put %+v", got, in)
	}
	if d := got.ExpiresAt.Sub(got.CreatedAt); d < time.Minute-time.Millisecond || d > time.Minute+time.Millisecond {
		t.Fatalf("ExpiresAt − CreatedAt = %v; want the TTL", d)
	}
	if e.Advance == nil && got.CreatedAt.Before(before.Add(-time.Second)) {
		t.Fatalf("CreatedAt %v is before the Put (%v)", got.CreatedAt, before)
	}
	// The other state round-trips too, with an empty response.
	nr := store.Record{Key: key(t, "nr"), Fingerprint: in.Fingerprint, State: store.StateNotReplayable, Fence: 1}
	put(t, e, nr, time.Minute)
	if got, ok := getRecord(t, e, nr.Key); !ok || got.State != store.StateNotReplayable || len(got.Response) != 0 {
		t.Fatalf("not-replayable record round trip: %+v, %v", got, ok)
	}
	// A not-replayable record given a response keeps it.
	nr.Key, nr.Response = key(t, "nr-response"), []byte("its own bytes")
	put(t, e, nr, time.Minute)
	if got, ok := getRecord(t, e, nr.Key); !ok || got.State != store.StateNotReplayable || string(got.Response) != "its own bytes" {
		t.Fatalf("not-replayable record with a response, round trip: %+v, %v", got, ok)
	}
}

func testRecordsGetMissing(t *testing.T, e *RecordsEnv) {
	if _, ok := getRecord(t, e, key(t, "never")); ok {
		t.Fatal("Get found a record never written")
	}
}

func testRecordsExpiry(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	if e.Advance != nil {
		ttl := 10 * time.Second
		put(t, e, record(k, 1, "x"), ttl)
		e.Advance(ttl - time.Millisecond)
		if _, ok := getRecord(t, e, k); !ok {
			t.Fatal("record gone at expiry − 1ms")
		}
		e.Advance(time.Millisecond)
		if _, ok := getRecord(t, e, k); ok {
			t.Fatal("record visible at its expiry instant")
		}
		return
	}
	ttl := 6 * e.Margin
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatal("the machine was too busy to observe the record within its margins five times running")
		}
		k := key(t, fmt.Sprint(round))
		t0 := time.Now()
		put(t, e, record(k, 1, "x"), ttl)
		time.Sleep(time.Until(t0.Add(ttl - e.Margin)))
		_, ok := getRecord(t, e, k)
		if time.Now().After(t0.Add(ttl)) {
			continue
		}
		if !ok {
			t.Fatalf("record gone at expiry − %v", e.Margin)
		}
		break
	}
	put(t, e, record(k, 1, "x"), ttl)
	t1 := time.Now()
	time.Sleep(time.Until(t1.Add(ttl + e.Margin)))
	if _, ok := getRecord(t, e, k); ok {
		t.Fatalf("record visible at expiry + %v", e.Margin)
	}
}

func testRecordsFencedPut(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	put(t, e, record(k, 5, "five"), longTTL)
	if put(t, e, record(k, 3, "three"), longTTL) {
		t.Fatal("a Put with a lower fence overwrote the record")
	}
	if got, _ := getRecord(t, e, k); string(got.Response) != "five" || got.Fence != 5 {
		t.Fatalf("a refused Put changed the record: %+v", got)
	}
	if !put(t, e, record(k, 5, "five again"), longTTL) {
		t.Fatal("a Put with an equal fence was refused")
	}
	if !put(t, e, record(k, 9, "nine"), longTTL) {
		t.Fatal("a Put with a higher fence was refused")
	}
	if got, _ := getRecord(t, e, k); string(got.Response) != "nine" || got.Fence != 9 {
		t.Fatalf("record %+v; want fence 9", got)
	}
	if put(t, e, record(k, 0, "unfenced"), longTTL) {
		t.Fatal("a Put with fence 0 overwrote a fenced record")
	}
}

func testRecordsPutOverExpired(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	ttl := 4 * e.Margin
	if e.Advance != nil {
		ttl = 10 * time.Second
	}
	put(t, e, record(k, 9, "old"), ttl)
	if e.Advance != nil {
		e.Advance(ttl)
	} else {
		time.Sleep(ttl + e.Margin)
	}
	if !put(t, e, record(k, 2, "new"), longTTL) {
		t.Fatal("an expired record's fence refused a new Put")
	}
	if got, ok := getRecord(t, e, k); !ok || string(got.Response) != "new" {
		t.Fatalf("record %+v, %v; want the new one", got, ok)
	}
}

func testRecordsConcurrentPuts(t *testing.T, e *RecordsEnv) {
	for round := range 5 {
		k := key(t, fmt.Sprint(round))
		const writers = 16
		order := mrand.Perm(writers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, writers)
		for _, i := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				f := idemkit.Fence(i + 1)
				if _, err := e.Records.Put(t.Context(), record(k, f, fmt.Sprint("response of fence ", f)), longTTL); err != nil {
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent Put: %v", err)
		}
		got, ok := getRecord(t, e, k)
		if !ok || got.Fence != writers || string(got.Response) != fmt.Sprint("response of fence ", idemkit.Fence(writers)) {
			t.Fatalf("round %d: after concurrent puts the record is %+v; want fence %d and its response", round, got, writers)
		}
	}
}

func testRecordsLargeResponses(t *testing.T, e *RecordsEnv) {
	for _, size := range []int{0, 1, 64 << 10, 900 << 10} {
		if e.MaxResponseBytes > 0 && size > e.MaxResponseBytes {
			continue
		}
		k := key(t, fmt.Sprint(size))
		body := make([]byte, size)
		_, _ = rand.Read(body)
		r := record(k, 1, "")
		r.Response = body
		put(t, e, r, longTTL)
		got, ok := getRecord(t, e, k)
		if !ok || !bytes.Equal(got.Response, body) {
			t.Fatalf("a %d-byte response did not round-trip (found %v, %d bytes)", size, ok, len(got.Response))
		}
	}
}

func testRecordsTooLarge(t *testing.T, e *RecordsEnv) {
	if e.MaxResponseBytes <= 0 {
		t.Skip("the store declares no response limit within the suite's sizes (Env.MaxResponseBytes is 0)")
	}
	k := key(t, "k")
	r := record(k, 1, "")
	r.Response = make([]byte, e.MaxResponseBytes+1)
	ok, err := e.Records.Put(t.Context(), r, longTTL)
	if ok || !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Put of %d bytes = %v, %v; want an error matching store.ErrTooLarge", len(r.Response), ok, err)
	}
	if _, found := getRecord(t, e, k); found {
		t.Fatal("a refused oversized Put left a record")
	}
	r.Response = r.Response[:e.MaxResponseBytes]
	if !put(t, e, r, longTTL) {
		t.Fatal("a response of exactly the limit was refused")
	}
}

func testRecordsKeys(t *testing.T, e *RecordsEnv) {
	keys := anyKeys(t)
	for i, k := range keys {
		put(t, e, record(k, idemkit.Fence(i+1), fmt.Sprint("value ", i)), longTTL)
	}
	for i, k := range keys {
		got, ok := getRecord(t, e, k)
		if !ok || string(got.Response) != fmt.Sprint("value ", i) || got.Fence != idemkit.Fence(i+1) {
			t.Fatalf("key %q: got %+v, %v; each key must hold its own record", k, got, ok)
		}
	}
	// Composed and decomposed spellings are different record keys: a store
	// does not normalise (the guard hands it exact keys).
	if got, _ := getRecord(t, e, keys[decomposedIndex]); string(got.Response) != fmt.Sprint("value ", decomposedIndex) {
		t.Fatalf("the decomposed key returned %q", got.Response)
	}
}

func testRecordsDelete(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	put(t, e, record(k, 1, "x"), longTTL)
	deleted, err := e.Records.Delete(t.Context(), k)
	if err != nil || !deleted {
		t.Fatalf("Delete = %v, %v; want true", deleted, err)
	}
	if _, ok := getRecord(t, e, k); ok {
		t.Fatal("Get found a deleted record")
	}
	deleted, err = e.Records.Delete(t.Context(), k)
	if err != nil || deleted {
		t.Fatalf("second Delete = %v, %v; want false", deleted, err)
	}
	if !put(t, e, record(k, 1, "again"), longTTL) {
		t.Fatal("Put after Delete was refused")
	}
}

func testRecordsNoAliasing(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	r := record(k, 1, "original")
	put(t, e, r, longTTL)
	r.Response[0] = 'X'
	got, _ := getRecord(t, e, k)
	if string(got.Response) != "original" {
		t.Fatalf("changing the caller's slice after Put changed the record: %q", got.Response)
	}
	got.Response[0] = 'Y'
	again, _ := getRecord(t, e, k)
	if string(again.Response) != "original" {
		t.Fatalf("changing a returned slice changed the record: %q", again.Response)
	}
}

func testRecordsInvalid(t *testing.T, e *RecordsEnv) {
	ctx := t.Context()
	long := strings.Repeat("x", store.MaxKeyBytes+1)
	check := func(phase string) {
		_, _, err := e.Records.Get(ctx, "")
		wantCode(t, phase+" Get(empty)", err, idemkit.CodeInvalidArgument)
		_, _, err = e.Records.Get(ctx, long)
		wantCode(t, phase+" Get(long)", err, idemkit.CodeInvalidArgument)
		_, err = e.Records.Delete(ctx, "")
		wantCode(t, phase+" Delete(empty)", err, idemkit.CodeInvalidArgument)
		for _, c := range []struct {
			name string
			rec  store.Record
			ttl  time.Duration
		}{
			{"empty key", record("", 1, "x"), time.Minute},
			{"long key", record(long, 1, "x"), time.Minute},
			{"zero state", store.Record{Key: key(t, "k")}, time.Minute},
			{"zero ttl", record(key(t, "k"), 1, "x"), 0},
			{"sub-millisecond ttl", record(key(t, "k"), 1, "x"), time.Microsecond},
		} {
			_, err := e.Records.Put(ctx, c.rec, c.ttl)
			wantCode(t, phase+" Put("+c.name+")", err, idemkit.CodeInvalidArgument)
			if strings.Contains(err.Error(), long[:40]) {
				t.Fatal("the error message repeats the key")
			}
		}
	}
	check("live:")
	if _, ok := getRecord(t, e, key(t, "k")); ok {
		t.Fatal("an invalid Put wrote a record")
	}
	e.Break()
	check("broken backend:") // validation comes before any I/O
}

func testRecordsEndedContext(t *testing.T, e *RecordsEnv) {
	k := key(t, "k")
	put(t, e, record(k, 1, "x"), longTTL)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		code idemkit.Code
	}{{canceled, idemkit.CodeAborted}, {expired, idemkit.CodeNetworkTimeout}} {
		_, _, err := e.Records.Get(c.ctx, k)
		wantCode(t, "Get", err, c.code)
		_, err = e.Records.Put(c.ctx, record(k, 2, "y"), longTTL)
		wantCode(t, "Put", err, c.code)
		_, err = e.Records.Delete(c.ctx, k)
		wantCode(t, "Delete", err, c.code)
	}
	if got, ok := getRecord(t, e, k); !ok || string(got.Response) != "x" {
		t.Fatalf("operations with an ended ctx changed the record: %+v, %v", got, ok)
	}
}

func testRecordsBroken(t *testing.T, e *RecordsEnv) {
	k := key(t, "secret-key")
	put(t, e, record(k, 1, "x"), longTTL)
	e.Break()
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s on an unreachable backend: no error", what)
		}
		if c := idemkit.CodeOf(err); c != idemkit.CodeServiceUnavailable && c != idemkit.CodeNetworkTimeout {
			t.Fatalf("%s on an unreachable backend: code %v (%v)", what, c, err)
		}
		if strings.Contains(err.Error(), "secret-key") {
			t.Fatalf("%s: the error message contains the raw key: %v", what, err)
		}
	}
	_, _, err := e.Records.Get(ctx, k)
	check("Get", err)
	_, err = e.Records.Put(ctx, record(k, 2, "y"), longTTL)
	check("Put", err)
	_, err = e.Records.Delete(ctx, k)
	check("Delete", err)
}
