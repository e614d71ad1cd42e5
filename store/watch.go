package store

import "context"

// Watcher is an optional interface of a [Store] that tells a waiter (a
// guard's duplicate, a lock's waiter) when the claim it waits
// for has ended, so that it claims again at once instead of polling. It
// notifies on every Complete, Release and Delete of a key through the
// backend's own notification (Redis pub/sub, PostgreSQL LISTEN/NOTIFY,
// Firestore snapshot listeners), with one listener per process (or per
// watched key) however many wait.
type Watcher interface {
	// Watch returns a channel that is closed when the record under key
	// may have stopped being a claim (an outcome was completed, the claim
	// released, the record deleted). It returns once the watch is in
	// place: a change made after Watch returns closes the channel, so a
	// caller that watches, then reads the record, misses nothing. The
	// channel may close spuriously, and a notification may be lost (a
	// listener connection cut): callers re-read the record after every
	// wake-up and keep polling, more slowly, as a fallback. A watch that
	// cannot be set up returns a channel that never closes. A release
	// may wake the key's watches one at a time, the oldest first (only
	// one waiter can take the key; one that lets its turn pass wakes the
	// next), as the Redis engine does; completions and deletions wake
	// them all.
	//
	// Stop the watch with the returned function (safe to call more than
	// once) to free what it holds if it has not fired. ctx bounds the
	// setup only; the channel outlives it.
	Watch(ctx context.Context, key string) (ch <-chan struct{}, stop func())
}
