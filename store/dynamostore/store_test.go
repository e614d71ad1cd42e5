package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/dynamostore"
)

const testFP = "test-v1:abababababababababababababababababababababababababababababababab"

// TestNewRefusesMisconfiguration: New and CreateTable refuse a nil client,
// a nil option and out-of-range settings with InvalidArgument, naming the
// setting, before any request.
func TestNewRefusesMisconfiguration(t *testing.T) {
	client, c := newClient(t, "http://127.0.0.1:1")
	if _, err := dynamostore.New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "client") {
		t.Fatalf("New(nil): %v; want InvalidArgument naming the client", err)
	}
	for _, tc := range []struct {
		opt  dynamostore.Option
		want string
	}{
		{nil, "option is nil"},
		{dynamostore.WithTable("ab"), "3 to 255"},
		{dynamostore.WithTable(strings.Repeat("a", 256)), "3 to 255"},
		{dynamostore.WithTable("a/b"), "at byte 1"},
		{dynamostore.WithMaxResponseBytes(0), "maximum response size"},
		{dynamostore.WithMaxResponseBytes(400<<10 + 1), "maximum response size"},
		{dynamostore.WithMaxClockStep(-time.Second), "clock step"},
		{dynamostore.WithMaxClockSkew(-time.Second), "clock skew"},
	} {
		_, err := dynamostore.New(client, tc.opt)
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with a bad option: %v; want InvalidArgument saying %q", err, tc.want)
		}
		err = dynamostore.CreateTable(t.Context(), client, tc.opt)
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CreateTable with a bad option: %v; want InvalidArgument saying %q", err, tc.want)
		}
	}
	if n := c.RoundTrips(); n != 0 {
		t.Fatalf("%d requests sent; want none", n)
	}
}

// TestCreateTable: CreateTable makes a table the store works on, is
// idempotent, and refuses (Misconfigured, naming the fix) a table of the
// name whose key schema or lock-id index is not the store's.
func TestCreateTable(t *testing.T) {
	t.Parallel()
	client, _ := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	if err := dynamostore.CreateTable(t.Context(), client, opt); err != nil {
		t.Fatalf("CreateTable on the table it made: %v", err)
	}
	s := newStore(t, client, opt)
	if _, claimed, err := s.Claim(t.Context(), "k", testFP, time.Minute); err != nil || !claimed {
		t.Fatalf("Claim on the new table: %v, %v", claimed, err)
	}

	str := types.ScalarAttributeTypeS
	for _, tc := range []struct {
		name string
		in   dynamodb.CreateTableInput
		want string
	}{
		{"OtherKey", dynamodb.CreateTableInput{
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: str}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		}, "partition key pk"},
		{"NoIndex", dynamodb.CreateTableInput{
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: str}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		}, "lockId-index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := testenv.Name(t)
			in := tc.in
			in.TableName, in.BillingMode = aws.String(name), types.BillingModePayPerRequest
			if _, err := client.CreateTable(t.Context(), &in); err != nil {
				t.Fatal(err)
			}
			err := dynamostore.CreateTable(t.Context(), client, dynamostore.WithTable(name))
			if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateTable on a table not the store's: %v; want Misconfigured naming %q", err, tc.want)
			}
		})
	}
}

// rawItem reads the item of key as DynamoDB holds it.
func rawItem(t *testing.T, client *dynamodb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dynamostore.EncodeKey(key)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func numAttr(t *testing.T, m map[string]types.AttributeValue, name string) int64 {
	t.Helper()
	v, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("the item has no number %s: %v", name, m)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestExpireAtKeepsWhatTheRulesKeep reads the TTL attribute (Unix s) of a
// claim, its outcome and a tombstone, with a clock of the test's, the
// default clock step (a minute) and skew (a second): never before the
// record may go (a claim ClaimRetention past its lease, nothing before
// its fence plus the step), plus the skew, since DynamoDB deletes by its
// own clock; and no more than a second later than that.
func TestExpireAtKeepsWhatTheRulesKeep(t *testing.T) {
	t.Parallel()
	client, _ := newClient(t, testenv.Dynamo(t).URL)
	opt, table := newTable(t, client)
	clk := newClock()
	s := newStore(t, client, opt, dynamostore.WithClock(clk.Now))
	const step, skew = time.Minute, time.Second
	check := func(what, key string, keepMs int64) {
		t.Helper()
		got := numAttr(t, rawItem(t, client, table, key), dynamostore.AttrExpireAt) * 1000
		want := keepMs + skew.Milliseconds()
		if got < want || got > want+1000 {
			t.Fatalf("%s: expireAt %d ms; want [%d, %d]", what, got, want, want+1000)
		}
	}
	ctx := t.Context()

	// A claim whose lease is shorter than the clock step: its fence rules.
	c, _, err := s.Claim(ctx, "short", testFP, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short := max(c.ExpiresAt.UnixMilli()+store.ClaimRetention.Milliseconds(), int64(c.Fence)+1+step.Milliseconds())
	check("a claim of 1 s", "short", short)
	if ok, err := s.Release(ctx, "short", c.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	check("its tombstone (the claim's expiry stays)", "short", short)

	// A claim with a long lease, extended, then its outcome.
	c, _, err = s.Claim(ctx, "long", testFP, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	check("a claim of 1 h", "long", c.ExpiresAt.UnixMilli()+store.ClaimRetention.Milliseconds())
	clk.advance(time.Minute)
	until, ok, err := s.Extend(ctx, "long", c.Fence, 2*time.Hour)
	if err != nil || !ok {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	check("the claim extended by 2 h", "long", until.UnixMilli()+store.ClaimRetention.Milliseconds())
	c.State, c.Response = store.StateCompleted, []byte("ok")
	if ok, err := s.Complete(ctx, c, 24*time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	rec, _, err := s.Get(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	check("its outcome of 24 h", "long", rec.ExpiresAt.UnixMilli())
	if deleted, err := s.Delete(ctx, "long"); err != nil || !deleted {
		t.Fatalf("Delete: %v, %v", deleted, err)
	}
	check("the tombstone of the deleted outcome (the outcome's expiry stays)", "long", rec.ExpiresAt.UnixMilli())
}

// TestClockSkewMargin runs a holder and a taker whose clock is ahead of
// the holder's, each with a client and store of its own, with the default
// skew margin (a second): the taker sees the claim busy until its clock is
// a second past the lease end, then takes it over with a greater fence;
// the holder, whose own clock says its lease still runs, can then neither
// extend nor complete it, so the taker's outcome stands.
func TestClockSkewMargin(t *testing.T) {
	t.Parallel()
	url := testenv.Dynamo(t).URL
	hc, _ := newClient(t, url)
	opt, _ := newTable(t, hc)
	tc, _ := newClient(t, url)
	holderClock := newClock()
	takerClock := &clock{now: holderClock.Now()}
	holder := newStore(t, hc, opt, dynamostore.WithClock(holderClock.Now))
	taker := newStore(t, tc, opt, dynamostore.WithClock(takerClock.Now))
	ctx := t.Context()
	const lease = 10 * time.Second

	c, claimed, err := holder.Claim(ctx, "k", testFP, lease)
	if err != nil || !claimed {
		t.Fatalf("the holder's Claim: %v, %v", claimed, err)
	}
	holderClock.advance(lease / 2) // the holder's lease has 5 s to run by its clock

	takerClock.advance(lease + 900*time.Millisecond) // past the lease end by less than the margin
	if rec, claimed, err := taker.Claim(ctx, "k", testFP, lease); err != nil || claimed || rec.Fence != c.Fence {
		t.Fatalf("the taker's Claim 0.9 s past the lease end: %+v, %v, %v; want the holder's claim, busy", rec, claimed, err)
	}
	if _, live, err := taker.Get(ctx, "k"); err != nil || !live {
		t.Fatalf("the taker's Get 0.9 s past the lease end: %v, %v; want the live claim", live, err)
	}

	takerClock.advance(100 * time.Millisecond) // the margin is over
	n, claimed, err := taker.Claim(ctx, "k", testFP, lease)
	if err != nil || !claimed || n.Fence <= c.Fence {
		t.Fatalf("the taker's Claim 1 s past the lease end: %+v, %v, %v; want a new claim with a greater fence than %s", n, claimed, err, c.Fence)
	}

	if _, ok, err := holder.Extend(ctx, "k", c.Fence, lease); err != nil || ok {
		t.Fatalf("the old holder's Extend: %v, %v; want refused", ok, err)
	}
	old := c
	old.State, old.Response = store.StateCompleted, []byte("old")
	if ok, err := holder.Complete(ctx, old, time.Hour); err != nil || ok {
		t.Fatalf("the old holder's Complete: %v, %v; want refused", ok, err)
	}
	n.State, n.Response = store.StateCompleted, []byte("new")
	if ok, err := taker.Complete(ctx, n, time.Hour); err != nil || !ok {
		t.Fatalf("the taker's Complete: %v, %v", ok, err)
	}
	if ok, err := holder.Complete(ctx, old, time.Hour); err != nil || ok {
		t.Fatalf("the old holder's Complete over the new outcome: %v, %v; want refused", ok, err)
	}
	rec, ok, err := holder.Get(ctx, "k")
	if err != nil || !ok || string(rec.Response) != "new" || rec.Fence != n.Fence {
		t.Fatalf("the record: %+v, %v, %v; want the taker's outcome", rec, ok, err)
	}
}

// TestCompleteWhoseAnswerWasLost: a Complete whose PutItem reached
// DynamoDB but whose answer was lost is sent again by the SDK; the retry
// meets the outcome the first one wrote and is refused, and the store,
// seeing its own write, reports the outcome recorded. A second Complete
// of the same claim is still refused.
func TestCompleteWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	s := newStore(t, client, opt)
	ctx := t.Context()
	rec, _, err := s.Claim(ctx, "k", testFP, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Response = store.StateCompleted, []byte("once")
	lose := `"wid"`
	c.loseAnswer.Store(&lose)
	c.take()
	ok, err := s.Complete(ctx, rec, time.Hour)
	if err != nil || !ok {
		t.Fatalf("Complete whose first answer was lost: %v, %v; want recorded", ok, err)
	}
	if n, by := c.take(); c.loseAnswer.Load() != nil || n < 2 {
		t.Fatalf("the answer was not lost and the request not retried: %d requests (%s)", n, by)
	}
	if ok, err := s.Complete(ctx, rec, time.Hour); err != nil || ok {
		t.Fatalf("a second Complete of the claim: %v, %v; want refused", ok, err)
	}
	got, _, err := s.Get(ctx, "k")
	if err != nil || string(got.Response) != "once" {
		t.Fatalf("the record: %+v, %v", got, err)
	}
}

// TestFindClaim: a lock claim is found by its lock id from another
// store, with a Query and a strongly consistent read; not once released;
// and a fingerprint that is not a lock id is answered at once, with no
// request.
func TestFindClaim(t *testing.T) {
	t.Parallel()
	url := testenv.Dynamo(t).URL
	client, _ := newClient(t, url)
	opt, _ := newTable(t, client)
	other, c := newClient(t, url)
	a, b := newStore(t, client, opt), newStore(t, other, opt)
	ctx := t.Context()
	const id = "AAAAAAAAAAAAAAAAAAAAAA" // 22 base64url characters
	rec, _, err := a.Claim(ctx, "\xff lock", id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.take()
	got, ok, err := b.FindClaim(ctx, id)
	if err != nil || !ok || got.Key != "\xff lock" || got.Fence != rec.Fence {
		t.Fatalf("FindClaim: %+v, %v, %v; want the claim", got, ok, err)
	}
	if n, by := c.take(); by != "GetItem=1 Query=1" {
		t.Fatalf("FindClaim sent %d requests (%s); want GetItem=1 Query=1", n, by)
	}
	if _, ok, err := b.FindClaim(ctx, testFP); err != nil || ok {
		t.Fatalf("FindClaim of a guard's fingerprint: %v, %v", ok, err)
	}
	if n, _ := c.take(); n != 0 {
		t.Fatalf("FindClaim of a fingerprint that is not a lock id sent %d requests", n)
	}
	if ok, err := a.Release(ctx, "\xff lock", rec.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if _, ok, err := b.FindClaim(ctx, id); err != nil || ok {
		t.Fatalf("FindClaim after the release: %v, %v; want none", ok, err)
	}
}

// TestMissingTableIsMisconfigured: every operation on a table that does
// not exist fails with Misconfigured naming CreateTable, and keeps
// DynamoDB's error in the chain.
func TestMissingTableIsMisconfigured(t *testing.T) {
	t.Parallel()
	client, _ := newClient(t, testenv.Dynamo(t).URL)
	s := newStore(t, client, dynamostore.WithTable("no_such_table"))
	_, _, err := s.Claim(t.Context(), "k", testFP, time.Minute)
	var nf *types.ResourceNotFoundException
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "CreateTable") || !errors.As(err, &nf) {
		t.Fatalf("Claim on a missing table: %v; want Misconfigured naming CreateTable, wrapping ResourceNotFoundException", err)
	}
	_, err = s.Delete(context.WithoutCancel(t.Context()), "k")
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured {
		t.Fatalf("Delete on a missing table: %v; want Misconfigured", err)
	}
}

// TestClaimWhoseAnswerWasLost: a Claim whose PutItem reached DynamoDB but
// whose answer was lost is sent again by the SDK; the retry meets the
// claim the first one wrote and is refused, and the store, seeing its own
// write, returns that claim as made, not as a busy key.
func TestClaimWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	s := newStore(t, client, opt)
	lose := "lost-claim"
	c.loseAnswer.Store(&lose)
	c.take()
	rec, claimed, err := s.Claim(t.Context(), "lost-claim", testFP, time.Minute)
	if err != nil || !claimed || rec.State != store.StateClaimed || rec.Fingerprint != testFP {
		t.Fatalf("Claim whose first answer was lost: %+v, %v, %v; want the claim made", rec, claimed, err)
	}
	if n, by := c.take(); c.loseAnswer.Load() != nil || n < 2 {
		t.Fatalf("the answer was not lost and the request not retried: %d requests (%s)", n, by)
	}
	rec.State, rec.Response = store.StateCompleted, []byte("once")
	if ok, err := s.Complete(t.Context(), rec, time.Hour); err != nil || !ok {
		t.Fatalf("Complete of that claim: %v, %v", ok, err)
	}
}

// TestListEncodedKeys: List finds, under a readable prefix, the records
// whose keys are held encoded (not UTF-8, or starting with "#"), and
// under an empty prefix every live record, across pages of one item.
func TestListEncodedKeys(t *testing.T) {
	t.Parallel()
	client, _ := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	s := newStore(t, client, opt)
	ctx := t.Context()
	keys := []string{"p/plain", "p\xff", "#p", "q"}
	for _, k := range keys {
		if _, claimed, err := s.Claim(ctx, k, testFP, time.Hour); err != nil || !claimed {
			t.Fatalf("Claim %q: %v, %v", k, claimed, err)
		}
	}
	list := func(prefix string) []string {
		var got []string
		after := ""
		for range 20 {
			recs, next, err := s.List(ctx, prefix, after, 1)
			if err != nil {
				t.Fatalf("List %q: %v", prefix, err)
			}
			for _, r := range recs {
				got = append(got, r.Key)
			}
			if next == "" {
				slices.Sort(got)
				return got
			}
			after = next
		}
		t.Fatalf("List %q did not end", prefix)
		return nil
	}
	if got, want := list("p"), []string{"p/plain", "p\xff"}; !slices.Equal(got, want) {
		t.Errorf("List under p: %q; want %q", got, want)
	}
	if got, want := list("#"), []string{"#p"}; !slices.Equal(got, want) {
		t.Errorf("List under #: %q; want %q", got, want)
	}
	if got, want := list(""), []string{"#p", "p/plain", "p\xff", "q"}; !slices.Equal(got, want) {
		t.Errorf("List of everything: %q; want %q", got, want)
	}
	if _, _, err := s.List(ctx, "", "not base64!", 1); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Errorf("List with a foreign cursor: %v; want InvalidArgument", err)
	}
}

// TestLargestResponseFitsAnItem: with the default limit, a response of
// the largest size the store accepts beside its key and fingerprint is
// written and read back whole (DynamoDB's 400 KB item limit is counted
// conservatively), and one byte more is refused with store.ErrTooLarge
// before any request.
func TestLargestResponseFitsAnItem(t *testing.T) {
	t.Parallel()
	client, c := newClient(t, testenv.Dynamo(t).URL)
	opt, _ := newTable(t, client)
	s := newStore(t, client, opt)
	ctx := t.Context()
	for _, key := range []string{"short", strings.Repeat("\xff", store.MaxKeyBytes)} {
		rec, _, err := s.Claim(ctx, key, testFP, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		limit := dynamostore.MaxResponse(key, testFP)
		rec.State, rec.Response = store.StateCompleted, make([]byte, limit+1)
		c.take()
		if ok, err := s.Complete(ctx, rec, time.Hour); ok || !errors.Is(err, store.ErrTooLarge) {
			t.Fatalf("Complete with %d bytes: %v, %v; want store.ErrTooLarge", limit+1, ok, err)
		}
		if n, _ := c.take(); n != 0 {
			t.Fatalf("a refused oversized Complete sent %d requests", n)
		}
		rec.Response = rec.Response[:limit]
		for i := range rec.Response {
			rec.Response[i] = byte(i)
		}
		if ok, err := s.Complete(ctx, rec, time.Hour); err != nil || !ok {
			t.Fatalf("Complete with %d bytes (a %d-byte key): %v, %v", limit, len(key), ok, err)
		}
		got, _, err := s.Get(ctx, key)
		if err != nil || !bytes.Equal(got.Response, rec.Response) {
			t.Fatalf("the %d-byte response did not round-trip: %d bytes, %v", limit, len(got.Response), err)
		}
	}
}
