package middleware

import (
	"context"
	"crypto/rand"
	"time"
)

// checkScope is the scope of the records Check writes; no request shares
// their keys (each ends in 128 random bits).
const checkScope = "idemkit:check"

// checkLease is the lease of a Check's record, in case its release fails.
const checkLease = time.Second

// Check tells whether the guard's backend can serve it, as a request
// would find it: it claims a record of its own (scope "idemkit:check", a
// random key) and releases it, each under the op timeout, so that the
// store's connection, its tables or scripts and the permissions its
// writes need are all exercised. It returns nil, or an
// [*UnavailableError] wrapping the backend's coded error ([idemkit.Error],
// with the native cause), whose text says what is wrong and, for a
// backend that is not set up, the fix: "run pgstore.SetupSchema", the
// grants or ACL commands the store needs.
//
// Call it at startup and refuse to start on an error: a backend that is
// missing its table, or refuses the store's role, fails every request
// (HTTP 500) until an operator fixes it. It costs two round trips and
// leaves nothing behind but what a released claim leaves.
func (g *Guard) Check(ctx context.Context) error {
	key, err := g.recordKey(checkScope, rand.Text())
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	rec, claimed, err := g.store.Claim(cctx, key, "check", checkLease)
	cancel()
	if err != nil {
		return &UnavailableError{Op: "check", Err: err}
	}
	if !claimed {
		return nil // someone else's record, by a 1-in-2^128 chance: the backend answered
	}
	cctx, cancel = context.WithTimeout(ctx, g.cfg.opTimeout)
	defer cancel()
	if _, err := g.store.Release(cctx, key, rec.Fence); err != nil {
		return &UnavailableError{Op: "check", Err: err}
	}
	return nil
}
