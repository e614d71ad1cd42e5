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
// [Guard.Inspect]); payloads and credentials are stored only as hashes.
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
	// Steps are a live claim's recorded steps (see [Step]), in order,
	// including those it carried over from earlier claims of the key: at
	// most store.MaxSteps, their names and results at most
	// store.MaxStepBytes in all.
	Steps []InspectedStep
}

// InspectedStep is one recorded step of a claim, as [Guard.Inspect] shows
// it.
type InspectedStep struct {
	Name   string // the step's name, as the work gave it to Step
	Size   int    // the bytes of its result
	Result []byte // its result, only when the response was asked for
}

// Inspect reads the record of key in scope in one round trip, without
// changing it, and reports false when there is none. The response, which
// may hold personal data, is left out unless withResponse.
func (g *Guard) Inspect(ctx context.Context, scope, key string, withResponse bool) (Inspection, bool, error) {
	recordKey, err := g.recordKey(scope, key)
	if err != nil {
		return Inspection{}, false, err
	}
	in, ok, err := g.read(ctx, recordKey, withResponse)
	if err != nil || !ok {
		return Inspection{}, false, err
	}
	return inspection(recordKey, scope, key, in, withResponse), true, nil
}

// inspection is the operator's view of the store's record of key in scope.
// Step results are shown only withResults.
func inspection(recordKey, scope, key string, in store.Inspection, withResults bool) Inspection {
	stored, binding := splitStored(in.Fingerprint)
	alg, _, _ := strings.Cut(stored, ":")
	var steps []InspectedStep
	if len(in.Steps) > 0 {
		steps = make([]InspectedStep, len(in.Steps))
		for i, st := range in.Steps {
			steps[i] = InspectedStep{Name: st.Name, Size: len(st.Result)}
			if withResults {
				steps[i].Result = st.Result
			}
		}
	}
	return Inspection{
		RecordKey: recordKey, Scope: scope, Key: key, State: in.State, Algorithm: alg, Bound: binding != "", Fence: in.Fence,
		CreatedAt: in.CreatedAt, ExpiresAt: in.ExpiresAt, Size: in.Size, Sealed: in.Sealed, Response: in.Response, Steps: steps,
	}
}

// ListQuery says which records [Guard.List] lists.
type ListQuery struct {
	Scope     string // the scope listed, unless AllScopes
	AllScopes bool   // every scope of the guard's namespace; KeyPrefix must be ""
	KeyPrefix string // only the keys that start with it
	After     string // the previous page's Listing.Next; "" for the first page
	Limit     int    // 1 to store.MaxListLimit; 0 means 100
}

// Listing is one page of [Guard.List].
type Listing struct {
	Records []Inspection // without their responses
	// Next continues the listing as ListQuery.After; "" once nothing is
	// left. A page may hold fewer than Limit records, even none.
	Next string
}

// List lists the live records of one scope, or of all, a bounded page at a
// time; the store must be or wrap a [store.Lister].
func (g *Guard) List(ctx context.Context, q ListQuery) (Listing, error) {
	if g.store == nil {
		_, err := g.recordKey("", "k")
		return Listing{}, err
	}
	if q.AllScopes && (q.Scope != "" || q.KeyPrefix != "") {
		return Listing{}, idemkit.NewError(idemkit.CodeInvalidArgument, "list", "AllScopes lists every key of every scope: leave Scope and KeyPrefix empty", nil)
	}
	if q.Limit == 0 {
		q.Limit = 100
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
		l.Records = append(l.Records, inspection(in.Key, scope, key, in, false))
	}
	return l, nil
}

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

// ForgetOption adjusts one call to [Guard.Forget]. The zero ForgetOption
// does nothing.
type ForgetOption struct{ force bool }

// Force makes [Guard.Forget] delete a live claim too: its holder, if it
// still runs, loses its lease, and a retry may run the work a second time
// meanwhile. It is for a holder known to be gone.
func Force() ForgetOption { return ForgetOption{force: true} }

// Forget deletes the record of key in scope and reports whether there was
// one: the next request with the key runs the work again. It is the way out
// of a key recorded not replayable, or whose sealed response no longer
// opens. A live claim is refused with a [*LiveClaimError] unless [Force].
//
// Without Force it reads the record, then deletes only an outcome (two
// round trips); an outcome that expires between the two while a new
// request claims the key leaves that new claim deleted, as Force would
// (closing that needs a delete conditional on the fence, which
// [store.Store] lacks). With Force it deletes in one round trip.
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
