package dynamostore_test

import (
	"bytes"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
)

// wantNoStepAttrs fails if the item of key carries the step attributes.
func wantNoStepAttrs(t *testing.T, what string, m map[string]types.AttributeValue) {
	t.Helper()
	for _, name := range []string{"sp", "sc"} {
		if _, ok := m[name]; ok {
			t.Fatalf("%s: the item carries %s without a step: %v", what, name, m)
		}
	}
}

// TestNoStepsCostNothing: a claim, a take-over, an extension, a release
// and a completion that record no step each send the one request they
// sent before steps existed and leave no step attribute on the item.
func TestNoStepsCostNothing(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, table := newTable(t, client)
	clk := newClock()
	s := newStore(t, client, opt, dynamostore.WithClock(clk.Now))
	ctx := t.Context()
	step := func(what, want string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if _, by := c.take(); by != want {
			t.Fatalf("%s sent %s; want %s", what, by, want)
		}
		wantNoStepAttrs(t, what, rawItem(t, client, table, "k"))
		c.take()
	}
	c.take()
	rec, _, err := s.Claim(ctx, "k", testFP, time.Second)
	step("a claim of a free key", "PutItem=1", err)
	_, _, err = s.Extend(ctx, "k", rec.Fence, time.Minute)
	step("an extension", "UpdateItem=1", err)
	_, err = s.Release(ctx, "k", rec.Fence)
	step("a release", "UpdateItem=1", err)
	clk.advance(time.Millisecond) // a fence above the tombstone's
	rec, _, err = s.Claim(ctx, "k", testFP, time.Second)
	step("a claim of a tombstone", "PutItem=1", err)
	clk.advance(3 * time.Second)
	rec, _, err = s.Claim(ctx, "k", testFP, time.Minute)
	step("a take-over of a run-out claim", "PutItem=1", err)
	rec.State, rec.Response = store.StateCompleted, []byte("ok")
	_, err = s.Complete(ctx, rec, time.Hour)
	step("a completion", "PutItem=1", err)
}

// TestStepKeepsNeverShorten reads the TTL attribute (Unix s) as steps,
// an extension, a release and a take-over change it: a step raises it to
// keep the item at least its keep (as a claim of that lease would be
// kept) but never lowers it, though the lease runs longer; an extension
// to a shorter lease moves the lease, not the steps' keep; a release
// keeps it; a take-over that carries the steps keeps it at least.
func TestStepKeepsNeverShorten(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, table := newTable(t, client)
	clk := newClock()
	s := newStore(t, client, opt, dynamostore.WithClock(clk.Now))
	ctx := t.Context()
	const skew = time.Second
	kept := func() int64 { return numAttr(t, rawItem(t, client, table, "k"), dynamostore.AttrExpireAt) * 1000 }
	atLeast := func(what string, ms int64) {
		t.Helper()
		if got := kept(); got < ms+skew.Milliseconds() {
			t.Fatalf("%s: expireAt %d ms; want at least %d", what, got, ms+skew.Milliseconds())
		}
	}
	record := func(rec store.Record, index int, keep time.Duration, want string) {
		t.Helper()
		c.take()
		ok, err := s.RecordStep(ctx, "k", rec.Fence, index, store.Step{Name: "s", Result: []byte{byte(index)}}, keep)
		if err != nil || !ok {
			t.Fatalf("RecordStep %d: %v, %v", index, ok, err)
		}
		if _, by := c.take(); by != want {
			t.Fatalf("RecordStep %d (keep %v) sent %s; want %s", index, keep, by, want)
		}
	}

	rec, _, err := s.Claim(ctx, "k", testFP, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lease := rec.ExpiresAt.UnixMilli() + store.ClaimRetention.Milliseconds()
	// A step kept a minute, on a claim of an hour: the lease's keep
	// stands (one write refused for it, one that appends alone; dynalite
	// sends no item back with the refusal).
	record(rec, 0, time.Minute, "UpdateItem=2")
	atLeast("a step kept less than the lease", lease)
	// A step kept a day raises it, in one write.
	record(rec, 1, 24*time.Hour, "UpdateItem=1")
	day := clk.Now().Add(24*time.Hour).UnixMilli() + store.ClaimRetention.Milliseconds()
	atLeast("a step kept a day", day)
	// An extension to a minute moves the lease, not the keep.
	clk.advance(time.Minute)
	until, ok, err := s.Extend(ctx, "k", rec.Fence, time.Minute)
	if err != nil || !ok {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	atLeast("a claim with steps extended by a minute", day)
	if got, _, _ := s.Get(ctx, "k"); !got.ExpiresAt.Equal(until) || len(got.Steps) != 2 {
		t.Fatalf("Get after Extend: lease %v, %d steps; want %v, 2", got.ExpiresAt, len(got.Steps), until)
	}
	// Released, then taken over by a claim of a second: still kept a day.
	if ok, err := s.Release(ctx, "k", rec.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	atLeast("the tombstone of the claim with steps", day)
	n, claimed, err := s.Claim(ctx, "k", testFP, time.Second)
	if err != nil || !claimed || len(n.Steps) != 2 {
		t.Fatalf("take-over: %+v, %v, %v; want a claim carrying 2 steps", n, claimed, err)
	}
	atLeast("the claim that carried the steps", day)
}

// TestTakeOverWithStepsRoundTrips counts the requests of a claim that
// meets a record with steps. The claim's PutItem, the one of a free key,
// is refused by a run-out claim or a tombstone that carries steps, and the
// claim takes the item over by a write conditioned on what the refusal
// showed: an UpdateItem that keeps the steps for the same fingerprint, a
// PutItem without them for another. That is one request more than a
// take-over of a record without steps: two on DynamoDB, three on
// dynalite, which reads the item the refusal does not send.
func TestTakeOverWithStepsRoundTrips(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, table := newTable(t, client)
	clk := newClock()
	s := newStore(t, client, opt, dynamostore.WithClock(clk.Now), dynamostore.WithMaxClockSkew(0))
	ctx := t.Context()
	claimWithStep := func(key, fp string) store.Record {
		t.Helper()
		rec, claimed, err := s.Claim(ctx, key, fp, time.Second)
		if err != nil || !claimed {
			t.Fatalf("Claim %s: %v, %v", key, claimed, err)
		}
		if ok, err := s.RecordStep(ctx, key, rec.Fence, len(rec.Steps), store.Step{Name: "reserve", Result: []byte("r-1")}, time.Hour); err != nil || !ok {
			t.Fatalf("RecordStep: %v, %v", ok, err)
		}
		return rec
	}
	for _, tc := range []struct {
		what, fp, want string
		steps          int
		end            func(key string, rec store.Record)
	}{
		{"a tombstone, same fingerprint", testFP, "GetItem=1 PutItem=1 UpdateItem=1", 1,
			func(key string, rec store.Record) { s.Release(ctx, key, rec.Fence) }},
		{"a run-out claim, same fingerprint", testFP, "GetItem=1 PutItem=1 UpdateItem=1", 1,
			func(string, store.Record) { clk.advance(2 * time.Second) }},
		{"a tombstone, another fingerprint", "test-v1:other", "GetItem=1 PutItem=2", 0,
			func(key string, rec store.Record) { s.Release(ctx, key, rec.Fence) }},
		{"a run-out claim, another fingerprint", "test-v1:other", "GetItem=1 PutItem=2", 0,
			func(string, store.Record) { clk.advance(2 * time.Second) }},
	} {
		key := strings.ReplaceAll(tc.what, " ", "-")
		rec := claimWithStep(key, testFP)
		tc.end(key, rec)
		c.take()
		n, claimed, err := s.Claim(ctx, key, tc.fp, time.Minute)
		if err != nil || !claimed || n.Fence <= rec.Fence || len(n.Steps) != tc.steps {
			t.Fatalf("%s: %+v, %v, %v; want a claim above fence %v carrying %d steps", tc.what, n, claimed, err, rec.Fence, tc.steps)
		}
		if _, by := c.take(); by != tc.want {
			t.Fatalf("%s: the take-over sent %s; want %s", tc.what, by, tc.want)
		}
		item := rawItem(t, client, table, key)
		if tc.steps == 0 {
			wantNoStepAttrs(t, tc.what, item)
		}
		if got := numAttr(t, item, "fe"); got != int64(n.Fence) {
			t.Fatalf("%s: the item's fence %d; want the new claim's %d", tc.what, got, n.Fence)
		}
	}
}

// TestLargestFingerprintHoldsAllSteps: a claim whose fingerprint is the
// largest the store accepts, under the longest key, records steps up to
// store.MaxSteps and store.MaxStepBytes and carries them through a
// release (dynalite refuses an item over 400 KB, counted as DynamoDB
// counts it); a fingerprint one byte larger is refused with
// InvalidArgument before any request.
func TestLargestFingerprintHoldsAllSteps(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	s := newStore(t, client, opt)
	ctx := t.Context()
	key := strings.Repeat("\xff", store.MaxKeyBytes)
	fp := "test-v1:"
	fp += strings.Repeat("x", (dynamostore.MaxResponse(key, fp)-dynamostore.StepsBytes)/2)
	if dynamostore.MaxResponse(key, fp+"x") >= dynamostore.StepsBytes {
		t.Fatalf("a %d-byte fingerprint is not the largest", len(fp))
	}
	c.take()
	if _, _, err := s.Claim(ctx, key, fp+"x", time.Minute); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("Claim with a %d-byte fingerprint: %v; want InvalidArgument", len(fp)+1, err)
	}
	if n, _ := c.take(); n != 0 {
		t.Fatalf("the refused claim sent %d requests", n)
	}
	rec, claimed, err := s.Claim(ctx, key, fp, time.Minute)
	if err != nil || !claimed {
		t.Fatalf("Claim with a %d-byte fingerprint: %v, %v", len(fp), claimed, err)
	}
	name := strings.Repeat("n", store.MaxStepNameBytes)
	result := bytes.Repeat([]byte{0xab}, store.MaxStepBytes/store.MaxSteps-len(name))
	for i := range store.MaxSteps {
		if ok, err := s.RecordStep(ctx, key, rec.Fence, i, store.Step{Name: name, Result: result}, time.Hour); err != nil || !ok {
			t.Fatalf("RecordStep %d of %d bytes each: %v, %v", i, len(name)+len(result), ok, err)
		}
	}
	if ok, err := s.Release(ctx, key, rec.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	n, claimed, err := s.Claim(ctx, key, fp, time.Minute)
	if err != nil || !claimed || len(n.Steps) != store.MaxSteps {
		t.Fatalf("take-over: %v, %v, %d steps; want %d", claimed, err, len(n.Steps), store.MaxSteps)
	}
	for i, st := range n.Steps {
		if st.Name != name || !bytes.Equal(st.Result, result) {
			t.Fatalf("step %d came back changed", i)
		}
	}
}

// TestStepWhoseAnswerWasLost: a RecordStep whose write reached DynamoDB
// but whose answer was lost is sent again by the SDK; the retry meets the
// step the first one recorded and is refused, and the store, seeing its
// own write, reports the step recorded, once. A step kept less than the
// lease (whose second write is the one that lands) is the same.
func TestStepWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	s := newStore(t, client, opt)
	ctx := t.Context()
	rec, _, err := s.Claim(ctx, "k", testFP, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, keep := range []time.Duration{time.Hour, time.Millisecond} {
		name := "charge-" + keep.String()
		c.loseAnswer.Store(&name)
		c.take()
		ok, err := s.RecordStep(ctx, "k", rec.Fence, i, store.Step{Name: name, Result: []byte("ch_1")}, keep)
		if err != nil || !ok {
			t.Fatalf("RecordStep (keep %v) whose answer was lost: %v, %v; want recorded", keep, ok, err)
		}
		if n, by := c.take(); c.loseAnswer.Load() != nil || n < 2 {
			t.Fatalf("keep %v: the answer was not lost and the request not retried: %d requests (%s)", keep, n, by)
		}
		if ok, err := s.RecordStep(ctx, "k", rec.Fence, i, store.Step{Name: name, Result: []byte("ch_2")}, keep); err != nil || ok {
			t.Fatalf("keep %v: the step again: %v, %v; want refused", keep, ok, err)
		}
	}
	got, _, err := s.Get(ctx, "k")
	if err != nil || len(got.Steps) != 2 || string(got.Steps[0].Result) != "ch_1" || string(got.Steps[1].Result) != "ch_1" {
		t.Fatalf("the claim's steps: %+v, %v; want the two first ones", got.Steps, err)
	}
}

// TestDeleteDropsLeftSteps: a Delete is one UpdateItem whatever the key
// holds. It reports deleted a live record (a claim, also within the skew
// margin past its lease, with steps or without; an outcome), and leaves
// its tombstone without steps. A tombstone or a run-out claim that
// carries steps is not live (false), but loses its steps and, for the
// claim, its holder's late Complete; its fence and expireAt stay, and the
// next claim of the fingerprint starts with no steps in the one PutItem
// of a claimable key. Nothing, a tombstone or a run-out claim without
// steps and an expired outcome are left as they are.
func TestDeleteDropsLeftSteps(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, table := newTable(t, client)
	clk := newClock()
	s := newStore(t, client, opt, dynamostore.WithClock(clk.Now)) // the default skew margin: a second
	ctx := t.Context()
	claim := func(key string, steps int) store.Record {
		t.Helper()
		rec, claimed, err := s.Claim(ctx, key, testFP, time.Second)
		if err != nil || !claimed {
			t.Fatalf("Claim %s: %v, %v", key, claimed, err)
		}
		for i := range steps {
			if ok, err := s.RecordStep(ctx, key, rec.Fence, i, store.Step{Name: "reserve", Result: []byte("r-1")}, time.Hour); err != nil || !ok {
				t.Fatalf("RecordStep %s: %v, %v", key, ok, err)
			}
		}
		return rec
	}
	complete := func(rec store.Record, ttl time.Duration) (bool, error) {
		rec.State, rec.Response = store.StateCompleted, []byte("ok")
		return s.Complete(ctx, rec, ttl)
	}
	for _, tc := range []struct {
		what    string
		deleted bool
		steps   int                                // the steps the claim records before it ends
		end     func(rec store.Record)             // ends it (nil: stays as it is)
		after   func(key string, rec store.Record) // checks after the Delete
	}{
		{what: "a live claim", deleted: true},
		{what: "a live claim with steps", deleted: true, steps: 1},
		{what: "a claim within the skew margin past its lease", deleted: true, steps: 1,
			end: func(store.Record) { clk.advance(1500 * time.Millisecond) }},
		{what: "a live outcome", deleted: true, end: func(rec store.Record) {
			if ok, err := complete(rec, time.Hour); err != nil || !ok {
				t.Fatalf("Complete: %v, %v", ok, err)
			}
		}},
		{what: "a released claim with steps", steps: 2,
			end: func(rec store.Record) { s.Release(ctx, rec.Key, rec.Fence) }},
		{what: "a run-out claim with steps", steps: 1,
			end: func(store.Record) { clk.advance(3 * time.Second) },
			after: func(key string, rec store.Record) {
				if ok, err := complete(rec, time.Hour); err != nil || ok {
					t.Fatalf("the late Complete of the run-out claim with steps deleted: %v, %v; want refused", ok, err)
				}
			}},
		{what: "a released claim",
			end: func(rec store.Record) { s.Release(ctx, rec.Key, rec.Fence) }},
		{what: "a run-out claim",
			end: func(store.Record) { clk.advance(3 * time.Second) },
			after: func(key string, rec store.Record) {
				if ok, err := complete(rec, time.Hour); err != nil || !ok {
					t.Fatalf("the late Complete of the run-out claim without steps: %v, %v; want it recorded", ok, err)
				}
			}},
		{what: "an expired outcome", end: func(rec store.Record) {
			if ok, err := complete(rec, time.Second); err != nil || !ok {
				t.Fatalf("Complete: %v, %v", ok, err)
			}
			clk.advance(2 * time.Second)
		}},
	} {
		key := strings.ReplaceAll(tc.what, " ", "-")
		rec := claim(key, tc.steps)
		if tc.end != nil {
			tc.end(rec)
		}
		before := rawItem(t, client, table, key)
		c.take()
		deleted, err := s.Delete(ctx, key)
		if err != nil || deleted != tc.deleted {
			t.Fatalf("Delete of %s: %v, %v; want %v", tc.what, deleted, err, tc.deleted)
		}
		if _, by := c.take(); by != "UpdateItem=1" {
			t.Fatalf("Delete of %s sent %s; want UpdateItem=1", tc.what, by)
		}
		item := rawItem(t, client, table, key)
		if tc.deleted || tc.steps > 0 {
			wantNoStepAttrs(t, "the item after the Delete of "+tc.what, item)
			if _, ok := item["fp"]; ok || numAttr(t, item, "st") != 0 {
				t.Fatalf("the item after the Delete of %s is no tombstone of the fence alone: %v", tc.what, item)
			}
			for _, name := range []string{"fe", dynamostore.AttrExpireAt} {
				if got, was := numAttr(t, item, name), numAttr(t, before, name); got != was {
					t.Fatalf("the Delete of %s changed %s from %d to %d", tc.what, name, was, got)
				}
			}
		} else if !maps.EqualFunc(item, before, func(a, b types.AttributeValue) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("the Delete of %s changed the item: %v; was %v", tc.what, item, before)
		}
		if tc.after != nil {
			tc.after(key, rec)
			continue
		}
		clk.advance(time.Millisecond) // a fence above the tombstone's
		c.take()
		n, claimed, err := s.Claim(ctx, key, testFP, time.Minute)
		if err != nil || !claimed || n.Fence <= rec.Fence || len(n.Steps) != 0 {
			t.Fatalf("the claim after the Delete of %s: %+v, %v, %v; want one above fence %v without steps", tc.what, n, claimed, err, rec.Fence)
		}
		if _, by := c.take(); by != "PutItem=1" {
			t.Fatalf("the claim after the Delete of %s sent %s; want PutItem=1", tc.what, by)
		}
	}
}
