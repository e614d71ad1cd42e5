// Package workctx names what the guard tells an adapter, through the
// context of a guarded call's work, about the work's transaction (see
// store.Transactor): an adapter that sends its response while the work
// runs holds it back once a transaction has begun, and sends it only once
// the outcome and the work's writes have committed.
package workctx

import "context"

// Key is the context key under which a guarded call's context answers its
// [Begun] (nil when the call has no transactional work).
type Key struct{}

// Begun reports whether the work has begun its transaction.
type Begun interface{ Begun() bool }

// Began reports whether the guarded call of ctx has begun a transaction
// that commits with its outcome.
func Began(ctx context.Context) bool {
	b, ok := ctx.Value(Key{}).(Begun)
	return ok && b != nil && b.Begun()
}
