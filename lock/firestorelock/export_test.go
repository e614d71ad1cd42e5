package firestorelock

import (
	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// Test hooks: the document layout and the error mapping, which the tests
// check directly.
var (
	DocID          = docID
	MapError       = mapError
	MapCommitError = mapCommitError
	MaxTimestamp   = maxTimestamp
)

const (
	FieldLockID    = fieldLockID
	FieldFence     = fieldFence
	FieldExpiresAt = fieldExpiresAt
	FieldExpireAt  = fieldExpireAt
	MaxDocIDBytes  = maxDocIDBytes
	MaxSweepBatch  = maxSweepBatch
)

// Collection returns the name of l's lock collection.
func Collection(l *Locker) string { return l.cfg.collection }

// SetBeforeSweepTx makes l call f between each sweep query and the
// transaction that re-checks its documents, so a test can change them in
// between.
func SetBeforeSweepTx(l *Locker, f func()) { l.beforeSweepTx = f }

// CheckCollection validates a collection name as New does.
func CheckCollection(name string) error { return checkCollection(name) }

// TombstoneData is the tombstone of a normalised key at fence f.
func TombstoneData(key string, f idemkit.Fence) map[string]any { return tombstoneData(key, f) }

// Listeners returns how many snapshot listeners l runs now, and how many
// it started so far.
func Listeners(l *Locker) (running, started int) {
	l.watch.mu.Lock()
	defer l.watch.mu.Unlock()
	return len(l.watch.byID), l.watch.started
}

// Armed reports whether a watch of key is in place on l: the key's
// listener has delivered a snapshot and it shows the key held, so a watch
// registered now is woken by the next change.
func Armed(l *Locker, key string) bool {
	k, err := lock.NormalizeKey(key)
	if err != nil {
		return false
	}
	l.watch.mu.Lock()
	defer l.watch.mu.Unlock()
	dw := l.watch.byID[docID(k)]
	return dw != nil && dw.known && !dw.free
}

// Waiters returns how many watches of key l holds.
func Waiters(l *Locker, key string) int {
	k, err := lock.NormalizeKey(key)
	if err != nil {
		return 0
	}
	l.watch.mu.Lock()
	defer l.watch.mu.Unlock()
	if dw := l.watch.byID[docID(k)]; dw != nil {
		return len(dw.waiters)
	}
	return 0
}

// PendingAcquires returns how many acquires of key wait in l for the
// next shared read of its document.
func PendingAcquires(l *Locker, key string) int {
	k, err := lock.NormalizeKey(key)
	if err != nil {
		return 0
	}
	l.share.mu.Lock()
	defer l.share.mu.Unlock()
	if ks := l.share.keys[docID(k)]; ks != nil && ks.pending != nil {
		return ks.pending.members
	}
	return 0
}
