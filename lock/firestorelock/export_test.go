package firestorelock

import "github.com/idemkit/idemkit/lock"

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
func TombstoneData(key string, f lock.Fence) map[string]any { return tombstoneData(key, f) }
