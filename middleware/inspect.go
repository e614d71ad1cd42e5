package middleware

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// Inspection is what an operator sees of one key's record (see
// [Guard.Inspect]). It never holds the request's payload nor its
// credentials: only their hashes are stored.
type Inspection struct {
	RecordKey string      // the key in the backend: "<namespace>:<scope>:<key>"
	State     store.State // claimed (running), completed or not-replayable
	Algorithm string      // the fingerprint's algorithm, such as "http-v2"; "" when the claim's request is unknown
	Bound     bool        // the record is bound to the credentials of the call that made it (see Credentials)
	Fence     lock.Fence  // the claim's fence, or the fence of the claim that wrote the outcome
	CreatedAt time.Time   // when the claim was made or the outcome written
	ExpiresAt time.Time   // a claim: when its lease runs out; an outcome: when it is forgotten
	Size      int         // bytes the response takes in the backend (sealed: its envelope)
	Sealed    bool        // the response is sealed (see store.Seal)
	Response  []byte      // the recorded response, only when asked for (and not sealed beyond this guard's reach)
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
	octx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	defer cancel()
	in, ok, err := store.Inspect(octx, g.store, recordKey, withResponse)
	if err != nil || !ok {
		return Inspection{}, false, err
	}
	stored, binding := splitStored(in.Fingerprint)
	alg, _, _ := strings.Cut(stored, ":")
	return Inspection{
		RecordKey: recordKey, State: in.State, Algorithm: alg, Bound: binding != "", Fence: in.Fence,
		CreatedAt: in.CreatedAt, ExpiresAt: in.ExpiresAt, Size: in.Size, Sealed: in.Sealed, Response: in.Response,
	}, true, nil
}

// Forget deletes the record of key in scope, whatever its state, and
// reports whether there was one: the next request with the key runs the
// work again. It is the way out of the guard's safest answers: a key whose
// outcome could not be recorded (claimed until its lease runs out), one
// recorded as not replayable (refused until the record expires), one whose
// sealed response can no longer be opened. A claim that is forgotten
// while its work runs can no longer complete: its outcome is not recorded.
// It costs one round trip.
func (g *Guard) Forget(ctx context.Context, scope, key string) (bool, error) {
	recordKey, err := g.recordKey(scope, key)
	if err != nil {
		return false, err
	}
	octx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	defer cancel()
	return g.store.Delete(octx, recordKey)
}

// recordKey returns the record key of key in scope:
// "<namespace>:<scope>:<key>".
func (g *Guard) recordKey(scope, key string) (string, error) {
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
