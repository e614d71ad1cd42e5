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

// Check tells whether the backend can serve the guard: it claims and
// releases a record of its own (scope "idemkit:check", a random key), two
// round trips that exercise the connection, the schema and the
// permissions. It returns nil, or an [*UnavailableError] whose text names
// the fix ("run pgstore.SetupSchema", the grants needed). Call it at
// startup and refuse to start on an error.
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
