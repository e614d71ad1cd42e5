package redisstore_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// raw returns the value and the expiry (Unix ms) of k's record as Redis
// holds it.
func raw(t *testing.T, c redis.UniversalClient, s *redisstore.Store, k string) (string, int64) {
	t.Helper()
	rk := redisstore.RedisKey(s, k)
	var get *redis.StringCmd
	var exp *redis.DurationCmd
	if _, err := c.TxPipelined(t.Context(), func(p redis.Pipeliner) error {
		get = p.Get(t.Context(), rk)
		exp = p.PExpireTime(t.Context(), rk)
		return nil
	}); err != nil {
		t.Fatalf("reading %s: %v", k, err)
	}
	return get.Val(), exp.Val().Milliseconds()
}

// setRaw writes v as k's record, keeping the key's expiry.
func setRaw(t *testing.T, c redis.UniversalClient, s *redisstore.Store, k, v string) {
	t.Helper()
	if err := c.SetArgs(t.Context(), redisstore.RedisKey(s, k), v, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
}

func mustStep(t *testing.T, s *redisstore.Store, rec store.Record, index int, name, result string, keep time.Duration) {
	t.Helper()
	ok, err := s.RecordStep(t.Context(), rec.Key, rec.Fence, index, store.Step{Name: name, Result: []byte(result)}, keep)
	if err != nil || !ok {
		t.Fatalf("RecordStep %d %q: %v, %v", index, name, ok, err)
	}
}

// TestStepsLeaveRecordsWithoutStepsAsTheyWere: a claim without steps is
// still c…<fingerprint> with nothing after it, and its release (a lock
// cycle) still leaves the short tombstone r<fence>; only a claim with
// steps takes the form s, and its release leaves t<fence> with its
// fingerprint and steps, at the claim's expiry, invisible to Get.
func TestStepsLeaveRecordsWithoutStepsAsTheyWere(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			s := newStore(t, c)
			fpr := fp.String()

			plain, claimed, err := s.Claim(ctx, "plain", fpr, time.Minute)
			if err != nil || !claimed {
				t.Fatal(claimed, err)
			}
			v, _ := raw(t, c, s, "plain")
			want := regexp.MustCompile(`^c60000:\d+:0:[A-Za-z0-9_-]{11}:` + strconv.Itoa(len(fpr)) + `:` + regexp.QuoteMeta(fpr) + `$`)
			if !want.MatchString(v) {
				t.Fatalf("a claim without steps is %q; want it to match %s", v, want)
			}
			if ok, err := s.Release(ctx, "plain", plain.Fence); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if v, _ := raw(t, c, s, "plain"); v != "r"+strconv.FormatUint(uint64(plain.Fence), 10) {
				t.Fatalf("the release of a claim without steps left %q; want r%d", v, plain.Fence)
			}

			rec, _, err := s.Claim(ctx, "stepped", fpr, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			mustStep(t, s, rec, 0, "reserve", "r:1", time.Minute)
			mustStep(t, s, rec, 1, "charge", "", time.Minute)
			v, before := raw(t, c, s, "stepped")
			steps := "2:7:reserve3:r:16:charge0:"
			if v[0] != 's' || !strings.HasSuffix(v, ":"+fpr+steps) {
				t.Fatalf("a claim with two steps is %q; want form s ending in the fingerprint and %q", v, steps)
			}
			if recs, _, err := s.List(ctx, "stepped", "", 10); err != nil || len(recs) != 1 || len(recs[0].Steps) != 2 || string(recs[0].Steps[0].Result) != "r:1" {
				t.Fatalf("List of the claim with two steps: %+v, %v; want it with its steps", recs, err)
			}
			if ok, err := s.Release(ctx, "stepped", rec.Fence); err != nil || !ok {
				t.Fatal(ok, err)
			}
			v, after := raw(t, c, s, "stepped")
			if want := "t" + strconv.FormatUint(uint64(rec.Fence), 10) + ":" + strconv.Itoa(len(fpr)) + ":" + fpr + steps; v != want || after != before {
				t.Fatalf("the release of a claim with steps left %q expiring at %d; want %q at %d", v, after, want, before)
			}
			if got, found, err := s.Get(ctx, "stepped"); err != nil || found {
				t.Fatalf("Get of a released claim with steps: %+v, %v, %v; want nothing", got, found, err)
			}
			if recs, _, err := s.List(ctx, "", "", 10); err != nil || len(recs) != 0 {
				t.Fatalf("List after both releases: %+v, %v; want nothing", recs, err)
			}
		})
	}
}

// TestStepKeepMovesTheExpiryNotTheFence: a step's keep pushes the key's
// expiry out (never in), and the claim's fence, lease and creation stay
// what they were; Extend keeps the steps and never shortens the expiry a
// step set, and neither do a release and the take-over after it, whose
// fence is greater.
func TestStepKeepMovesTheExpiryNotTheFence(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			s := newStore(t, c)
			rec, _, err := s.Claim(ctx, "k", fp.String(), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_, claimExp := raw(t, c, s, "k")
			mustStep(t, s, rec, 0, "reserve", "r-1", 3*time.Hour)
			_, stepExp := raw(t, c, s, "k")
			if stepExp < int64(rec.Fence)+(3*time.Hour).Milliseconds() || stepExp <= claimExp {
				t.Fatalf("the key expires at %d after a step kept for 3h; want at least %d", stepExp, int64(rec.Fence)+(3*time.Hour).Milliseconds())
			}
			got, found, err := s.Get(ctx, "k")
			if err != nil || !found || got.Fence != rec.Fence || !got.ExpiresAt.Equal(rec.ExpiresAt) || !got.CreatedAt.Equal(rec.CreatedAt) {
				t.Fatalf("Get after the step: %+v, %v, %v; want the claim %+v as it was", got, found, err, rec)
			}
			mustStep(t, s, rec, 1, "charge", "ch-1", time.Millisecond)
			if _, exp := raw(t, c, s, "k"); exp != stepExp {
				t.Fatalf("a step kept for 1ms moved the expiry from %d to %d", stepExp, exp)
			}
			if _, ok, err := s.Extend(ctx, "k", rec.Fence, 2*time.Minute); err != nil || !ok {
				t.Fatal(ok, err)
			}
			got, _, _ = s.Get(ctx, "k")
			if _, exp := raw(t, c, s, "k"); exp != stepExp || got.Fence != rec.Fence || len(got.Steps) != 2 {
				t.Fatalf("after Extend: expiry %d (want %d), %+v; want the fence and both steps", exp, stepExp, got)
			}
			if ok, err := s.Release(ctx, "k", rec.Fence); err != nil || !ok {
				t.Fatal(ok, err)
			}
			next, claimed, err := s.Claim(ctx, "k", fp.String(), time.Minute)
			if err != nil || !claimed || next.Fence <= rec.Fence || len(next.Steps) != 2 {
				t.Fatalf("the claim after the release: %+v, %v, %v; want a greater fence and both steps", next, claimed, err)
			}
			if _, exp := raw(t, c, s, "k"); exp < stepExp {
				t.Fatalf("the take-over's key expires at %d; want no sooner than the steps' %d", exp, stepExp)
			}
			if got, _, _ := s.Get(ctx, "k"); got.Fence != next.Fence || !got.ExpiresAt.Equal(next.ExpiresAt) {
				t.Fatalf("Get of the take-over: %+v; want %+v", got, next)
			}
		})
	}
}

// TestMalformedStepsAreReported: steps that cannot be read (a count that
// does not match them, a claim of form c with bytes after its
// fingerprint) are Internal errors saying the record is malformed, and
// nothing is written over them; a claim of another fingerprint, which
// carries no steps, takes the key over all the same.
func TestMalformedStepsAreReported(t *testing.T) {
	ctx := t.Context()
	c := nodeClient(t, testenv.Redis(t).Addr)
	s := newStore(t, c)
	malformed := func(what string, err error) {
		t.Helper()
		if idemkit.CodeOf(err) != idemkit.CodeInternal || !strings.Contains(err.Error(), "malformed") {
			t.Fatalf("%s: %v; want Internal saying the record is malformed", what, err)
		}
	}

	rec, _, err := s.Claim(ctx, "live", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, rec, 0, "reserve", "r-1", time.Minute)
	v, _ := raw(t, c, s, "live")
	setRaw(t, c, s, "live", strings.Replace(v, fp.String()+"1:", fp.String()+"2:", 1))
	_, _, err = s.Get(ctx, "live")
	malformed("Get of a claim with two steps counted and one there", err)
	_, _, err = s.Claim(ctx, "live", fp.String(), time.Minute)
	malformed("a replay's claim of it", err)

	// A released claim's steps, broken: the claim of the same fingerprint,
	// which would carry them, refuses; another's takes the key.
	rec, _, err = s.Claim(ctx, "released", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, rec, 0, "reserve", "r-1", time.Minute)
	if ok, err := s.Release(ctx, "released", rec.Fence); err != nil || !ok {
		t.Fatal(ok, err)
	}
	v, _ = raw(t, c, s, "released")
	broken := strings.TrimSuffix(v, "r-1") + "r-"
	setRaw(t, c, s, "released", broken)
	_, _, err = s.Claim(ctx, "released", fp.String(), time.Minute)
	malformed("a claim that carries a released claim's broken steps", err)
	if now, _ := raw(t, c, s, "released"); now != broken {
		t.Fatalf("the refused claim wrote %q over the broken tombstone %q", now, broken)
	}
	other, claimed, err := s.Claim(ctx, "released", "another", time.Minute)
	if err != nil || !claimed || len(other.Steps) != 0 || other.Fence <= rec.Fence {
		t.Fatalf("a claim of another fingerprint: %+v, %v, %v; want a new claim without steps", other, claimed, err)
	}

	// A claim of form c that holds a response after its fingerprint
	// (written by hand) takes no step.
	rec, _, err = s.Claim(ctx, "by-hand", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	v, _ = raw(t, c, s, "by-hand")
	setRaw(t, c, s, "by-hand", v+"a response")
	_, err = s.RecordStep(ctx, "by-hand", rec.Fence, 0, store.Step{Name: "reserve"}, time.Minute)
	malformed("RecordStep on a claim with a response after its fingerprint", err)
	if now, _ := raw(t, c, s, "by-hand"); now != v+"a response" {
		t.Fatalf("the refused step wrote %q", now)
	}
}

// TestRecordStepRetriedAfterLostReply: the connection breaks after the
// server recorded a step and before its reply arrived; go-redis sends the
// script again, which finds the very step recorded last and reports ok
// (not a lost claim). Another step at the same index is still refused.
func TestRecordStepRetriedAfterLostReply(t *testing.T) {
	ctx := t.Context()
	l := newLink(t, testenv.Redis(t).Addr)
	c := nodeClient(t, l.addr())
	s := newStore(t, c)
	rec, _, err := s.Claim(ctx, "k", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, rec, 0, "reserve", "r-1", time.Minute)
	l.dropReplyTo(redisstore.ScriptSHA("record-step"))
	ok, err := s.RecordStep(ctx, "k", rec.Fence, 1, store.Step{Name: "charge", Result: []byte("ch-1")}, time.Minute)
	if l.dropped.Load() != 1 {
		t.Fatalf("the reply was not lost (%d)", l.dropped.Load())
	}
	if err != nil || !ok {
		t.Fatalf("a step whose first reply was lost: %v, %v; want ok", ok, err)
	}
	got, _, err := s.Get(ctx, "k")
	if err != nil || len(got.Steps) != 2 || got.Steps[1].Name != "charge" || string(got.Steps[1].Result) != "ch-1" {
		t.Fatalf("Get: %+v, %v; want the two steps once each", got, err)
	}
	for _, step := range []store.Step{{Name: "charge", Result: []byte("ch-2")}, {Name: "charged", Result: []byte("ch-1")}} {
		if ok, err := s.RecordStep(ctx, "k", rec.Fence, 1, step, time.Minute); err != nil || ok {
			t.Fatalf("another step %+v at the recorded index: %v, %v; want refused", step, ok, err)
		}
	}
	if ok, err := s.RecordStep(ctx, "k", rec.Fence, 0, store.Step{Name: "reserve", Result: []byte("r-1")}, time.Minute); err != nil || ok {
		t.Fatalf("step 0 again, not the last: %v, %v; want refused", ok, err)
	}
}

// TestRecordStepWaitsForReplicas: with WithWaitForReplicas a step is on
// the replica as soon as RecordStep returns; on a master without a
// replica it fails closed with ServiceUnavailable, as a completion does.
func TestRecordStepWaitsForReplicas(t *testing.T) {
	ctx := t.Context()
	master, replica := replicated(t)
	s := newStore(t, master, redisstore.WithWaitForReplicas(1, 5*time.Second))
	reader := newStore(t, replica)
	rec, _, err := s.Claim(ctx, "k", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, rec, 0, "reserve", "r-1", time.Minute)
	if got, found, err := reader.Get(ctx, "k"); err != nil || !found || len(got.Steps) != 1 || string(got.Steps[0].Result) != "r-1" {
		t.Fatalf("the replica right after the step: %+v, %v, %v; want the claim with its step", got, found, err)
	}

	c := nodeClient(t, testenv.NewRedis(t).Addr)
	lone := newStore(t, c, redisstore.WithWaitForReplicas(1, 20*time.Millisecond))
	plain := newStore(t, c)
	rec, _, err = plain.Claim(ctx, "k", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := lone.RecordStep(ctx, "k", rec.Fence, 0, store.Step{Name: "reserve"}, time.Minute)
	if ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("a step without a replica to acknowledge it: %v, %v; want ServiceUnavailable", ok, err)
	}
}

// TestRecordStepOutOfMemory: over maxmemory (noeviction) a step, which
// adds data, is refused with RateLimited, while the release of a claim
// with steps goes on and keeps them.
func TestRecordStepOutOfMemory(t *testing.T) {
	ctx := t.Context()
	c := nodeClient(t, testenv.NewRedis(t).Addr)
	s := newStore(t, c)
	rec, _, err := s.Claim(ctx, "k", fp.String(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, rec, 0, "reserve", "r-1", time.Minute)
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(context.Background(), "maxmemory", "0")
	if _, err := s.RecordStep(ctx, "k", rec.Fence, 1, store.Step{Name: "charge"}, time.Minute); idemkit.CodeOf(err) != idemkit.CodeRateLimited {
		t.Fatalf("a step on an out-of-memory Redis: %v; want RateLimited", err)
	}
	if ok, err := s.Release(ctx, "k", rec.Fence); err != nil || !ok {
		t.Fatalf("the release of a claim with steps on an out-of-memory Redis: %v, %v", ok, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil { // a transaction reads the value
		t.Fatal(err)
	}
	if v, _ := raw(t, c, s, "k"); v[0] != 't' || !strings.HasSuffix(v, "1:7:reserve3:r-1") {
		t.Fatalf("the release left %q; want the tombstone t with the step", v)
	}
}

// TestStepsKeptForTheirKeepOnAClockedServer: on a server whose clock the
// test moves forward, a step's keep holds the steps past the claim's
// lease and retention, for a take-over and, past the take-over's own lease
// and retention, after its release; once the clock passes the keep they
// are gone, the next fence still greater.
func TestStepsKeptForTheirKeepOnAClockedServer(t *testing.T) {
	ctx := t.Context()
	clock := testenv.NewClock(t)
	c := nodeClient(t, testenv.NewRedisWithClock(t, clock).Addr)
	s := newStore(t, c)
	claim := func(what string, lease time.Duration, steps int) store.Record {
		t.Helper()
		rec, claimed, err := s.Claim(ctx, "k", fp.String(), lease)
		if err != nil || !claimed || len(rec.Steps) != steps {
			t.Fatalf("%s: %+v, %v, %v; want a claim with %d steps", what, rec, claimed, err, steps)
		}
		return rec
	}
	lease, keep := 10*time.Second, store.ClaimRetention+10*time.Minute
	first := claim("the first claim", lease, 0)
	mustStep(t, s, first, 0, "reserve", "r-1", keep)
	clock.Step(lease + store.ClaimRetention + 5*time.Minute)
	taken := claim("a take-over past the lease and retention, within the keep", time.Minute, 1)
	if ok, err := s.Release(ctx, "k", taken.Fence); err != nil || !ok {
		t.Fatal(ok, err)
	}
	// Past the take-over's own lease and retention (8m10s after the step),
	// within the step's keep (11m).
	clock.Step(3 * time.Minute)
	again := claim("a claim after a release, past the take-over's lease and retention, within the keep", lease, 1)
	if ok, err := s.Release(ctx, "k", again.Fence); err != nil || !ok {
		t.Fatal(ok, err)
	}
	clock.Step(keep)
	last := claim("a claim past the keep", time.Minute, 0)
	if last.Fence <= again.Fence {
		t.Fatalf("fence %v once the steps expired; want above %v", last.Fence, again.Fence)
	}
}
