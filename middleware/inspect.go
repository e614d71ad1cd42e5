package middleware

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Inspection is what an operator sees of one key's record (see
// [Guard.Inspect]). It never holds the request's payload nor its
// credentials: only their hashes are stored.
type Inspection struct {
	RecordKey string        // the key in the backend: "<namespace>:<scope>:<key>"
	Scope     string        // the record's scope (see Scope), as the guarded call gave it
	Key       string        // the idempotency key, as the guarded call gave it
	State     store.State   // claimed (running), completed or not-replayable
	Algorithm string        // the fingerprint's algorithm, such as "http-v2"; "" when the claim's request is unknown
	Bound     bool          // the record is bound to the credentials of the call that made it (see Credentials)
	Fence     idemkit.Fence // the claim's fence, or the fence of the claim that wrote the outcome
	CreatedAt time.Time     // when the claim was made or the outcome written
	ExpiresAt time.Time     // a claim: when its lease runs out; an outcome: when it is forgotten
	Size      int           // bytes the response takes in the backend (sealed: its envelope)
	Sealed    bool          // the response is sealed (see store.Seal)
	Response  []byte        // the recorded response, only when asked for (and not sealed beyond this guard's reach)
}

// Inspect reads the record of key in scope (see [Scope]; "" for none)
// without changing it, and reports false when there is none: for an
// operator looking at one key (a client's complaint, a key stuck "in
// progress" or "not replayable"). The response is left out unless
// withResponse is true: it may hold personal data. It costs one round
// trip.
func (g *Guard) Inspect(ctx context.Context, scope, key string, withResponse bool) (Inspection, bool, error) {
	recordKey, err := g.recordKey(scope, key)
	if err != nil {
		return Inspection{}, false, err
	}
	in, ok, err := g.read(ctx, recordKey, withResponse)
	if err != nil || !ok {
		return Inspection{}, false, err
	}
	return inspection(recordKey, scope, key, in), true, nil
}

// inspection is the operator's view of the store's record of key in scope.
func inspection(recordKey, scope, key string, in store.Inspection) Inspection {
	stored, binding := splitStored(in.Fingerprint)
	alg, _, _ := strings.Cut(stored, ":")
	return Inspection{
		RecordKey: recordKey, Scope: scope, Key: key, State: in.State, Algorithm: alg, Bound: binding != "", Fence: in.Fence,
		CreatedAt: in.CreatedAt, ExpiresAt: in.ExpiresAt, Size: in.Size, Sealed: in.Sealed, Response: in.Response,
	}
}

// ListQuery says which records [Guard.List] lists.
type ListQuery struct {
	// Scope is the scope whose records are listed (see [Scope]; "" for
	// none), unless AllScopes is set.
	Scope string
	// AllScopes lists the records of every scope of the guard's namespace;
	// KeyPrefix must then be "".
	AllScopes bool
	// KeyPrefix lists only the keys that start with it.
	KeyPrefix string
	// After is the cursor of the previous page (Listing.Next); "" for the
	// first page.
	After string
	// Limit is the most records of the page: 1 to store.MaxListLimit; 0
	// means 100.
	Limit int
}

// Listing is one page of [Guard.List].
type Listing struct {
	// Records are the page's records, without their responses (see
	// [Guard.Inspect] for one record's).
	Records []Inspection
	// Next continues the listing as ListQuery.After; "" once nothing is
	// left. A page may hold fewer than Limit records, even none, while Next
	// is not "". It is printable ASCII.
	Next string
}

// List lists the live records (running claims and outcomes) of the guard's
// namespace in one scope, or in all of them, optionally only the keys with
// a prefix, a page at a time, for an operator looking for keys (a tenant's
// keys stuck "in progress", the keys of one client): see [store.Lister]
// for what the backends list and in what order. The guard's store must be
// or wrap (through store.Seal) a [store.Lister], as every store of this
// repository is. A page costs the backend a bounded amount of work: for
// most backends one round trip; Redis scans a bounded part of its keyspace
// at a time.
func (g *Guard) List(ctx context.Context, q ListQuery) (Listing, error) {
	if g.store == nil {
		_, err := g.recordKey("", "k")
		return Listing{}, err
	}
	if q.AllScopes && (q.Scope != "" || q.KeyPrefix != "") {
		return Listing{}, idemkit.NewError(idemkit.CodeInvalidArgument, "list", "AllScopes lists every key of every scope: leave Scope and KeyPrefix empty", nil)
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	prefix := g.cfg.namespace + ":"
	if !q.AllScopes {
		prefix += escapeScope(q.Scope) + ":" + q.KeyPrefix
	}
	octx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	defer cancel()
	page, next, err := store.List(octx, g.store, prefix, q.After, q.Limit)
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Records: make([]Inspection, 0, len(page)), Next: next}
	for _, in := range page {
		scope, key, ok := g.splitRecordKey(in.Key)
		if !ok {
			continue // not a record of this guard (another application's key under the namespace)
		}
		l.Records = append(l.Records, inspection(in.Key, scope, key, in))
	}
	return l, nil
}

// DefaultListLimit is the page size of [Guard.List] when ListQuery.Limit
// is 0.
const DefaultListLimit = 100

// splitRecordKey returns the scope and key of one of the guard's record
// keys, the inverse of recordKey.
func (g *Guard) splitRecordKey(recordKey string) (scope, key string, ok bool) {
	rest, ok := strings.CutPrefix(recordKey, g.cfg.namespace+":")
	if !ok {
		return "", "", false
	}
	esc, key, ok := strings.Cut(rest, ":")
	if !ok || key == "" {
		return "", "", false
	}
	scope, err := url.PathUnescape(esc)
	if err != nil || escapeScope(scope) != esc {
		return "", "", false
	}
	return scope, key, true
}

// ForgetOption adjusts one call to [Guard.Forget]; [Force] makes the one
// there is. The zero ForgetOption does nothing.
type ForgetOption struct{ force bool }

// Force makes [Guard.Forget] delete the key's record even when it is a
// live claim, whose holder may still be running its work: that work then
// cannot record its outcome (its next lease renewal finds the claim gone
// and ends its ctx with idemkit.ErrLeaseLost), and a retry runs the work a
// second time, possibly while the first still runs. It is for a holder
// known to be gone that an operator cannot wait out (the claim frees its
// key when its lease runs out anyway). Without it a live claim is refused.
func Force() ForgetOption { return ForgetOption{force: true} }

// Forget deletes the record of key in scope and reports whether there was
// one: the next request with the key runs the work again. It is the way
// out of the guard's safest answers: a key recorded as not replayable
// (refused until the record expires), one whose sealed response can no
// longer be opened, a completed one whose work must run again.
//
// By default a live claim is not deleted: its holder may be running the
// work, renewing its lease, and deleting the claim would let a retry run
// the work a second time while the first still runs. Forget then deletes
// nothing and returns a [*LiveClaimError] (matching [ErrInProgress]) with
// the lease's expiry. A holder that crashed, or gave up recording its
// outcome, frees the key when its lease runs out (within the lease TTL of
// the guard that holds it, 10 s by default); [Force] deletes the claim at
// once.
//
// Without Force, Forget reads the record (one round trip) and deletes only
// an outcome (a second one). A key without a live record is reported
// false without a delete, so a claim made after the read is never
// deleted; a new claim cannot appear under a live outcome either. What
// remains is an outcome that ends during the round trip between the read
// and the delete (it reaches its expiry, or another Forget deletes it)
// while a new request claims the key in that same interval: the delete
// then removes that new claim, as Force would. Closing it needs a delete
// conditional on the record's fence, which [store.Store] does not have.
// With Force, Forget deletes whatever is there, in one round trip.
func (g *Guard) Forget(ctx context.Context, scope, key string, opts ...ForgetOption) (bool, error) {
	recordKey, err := g.recordKey(scope, key)
	if err != nil {
		return false, err
	}
	force := false
	for _, o := range opts {
		force = force || o.force
	}
	if !force {
		// Read without the response: a record whose sealed response no
		// longer opens can still be forgotten.
		in, ok, err := g.read(ctx, recordKey, false)
		switch {
		case err != nil || !ok:
			return false, err
		case in.State == store.StateClaimed:
			return false, &LiveClaimError{ExpiresAt: in.ExpiresAt, Fence: in.Fence}
		}
	}
	octx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	defer cancel()
	return g.store.Delete(octx, recordKey)
}

// read is store.Inspect of recordKey, bounded by the op timeout.
func (g *Guard) read(ctx context.Context, recordKey string, withResponse bool) (store.Inspection, bool, error) {
	octx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	defer cancel()
	return store.Inspect(octx, g.store, recordKey, withResponse)
}

// recordKey returns the record key of key in scope:
// "<namespace>:<scope>:<key>".
func (g *Guard) recordKey(scope, key string) (string, error) {
	if g.store == nil {
		// Every call starts here, so a Guard that New did not make fails
		// its calls with this error instead of panicking on the way.
		return "", idemkit.NewError(idemkit.CodeInvalidArgument, "execute", "the guard is a zero middleware.Guard; make it with middleware.New", nil)
	}
	if key == "" {
		return "", fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	}
	ns := g.cfg.namespace
	scope = escapeScope(scope)
	if n := len(ns) + 1 + len(scope) + 1 + len(key); n > store.MaxKeyBytes {
		return "", fmt.Errorf("%w: the key is %d bytes long; with its namespace and scope it must fit in %d", ErrInvalidKey, len(key), store.MaxKeyBytes)
	}
	return ns + ":" + scope + ":" + key, nil
}
