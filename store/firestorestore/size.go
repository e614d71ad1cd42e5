package firestorestore

import (
	"strconv"
	"unicode/utf8"

	"github.com/idemkit/idemkit/store"
)

const (
	maxDocumentBytes = 1 << 20 // Firestore's limit on a document's storage size
	// documentMargin is how far below the limit the store keeps record
	// documents, so that a Firestore release that counts a little
	// differently never fails a write.
	documentMargin = 1 << 10
)

// Firestore's storage sizes, as documented and as the emulator enforces
// them to the byte: a string is its UTF-8 bytes + 1, bytes their length,
// an integer or timestamp 8, a document name its ids + 16, a document its
// name, fields' names and values + 32.
const (
	nameOverhead     = 16
	documentOverhead = 32
	scalarSize       = 8
)

func stringSize(s string) int { return len(s) + 1 }

// textSize is the storage size of [text] of s.
func textSize(s string) int {
	if utf8.ValidString(s) {
		return stringSize(s)
	}
	return len(s)
}

// documentSize is the storage size of the outcome document with an n-byte
// response under key with fingerprint fp in collection.
func documentSize(collection, key, fp string, n int) int {
	size := stringSize(collection) + stringSize(docID(key)) + nameOverhead
	size += stringSize(fieldKey) + textSize(key)
	size += stringSize(fieldFingerprint) + textSize(fp)
	size += stringSize(fieldResponse) + n
	for _, f := range [...]string{fieldState, fieldFence, fieldTTL, fieldExpireAt} { // an outcome has no createdAt
		size += stringSize(f) + scalarSize
	}
	size += stringSize(fieldWriteID) + writeIDLen + 1 // a string of writeIDLen bytes
	return size + documentOverhead
}

// maxResponse is the largest response Complete and Put accept under key
// with fingerprint fp: [WithMaxResponseBytes], or less when the record
// document would come within documentMargin of Firestore's limit. It is
// negative when not even an empty response fits.
func (s *Store) maxResponse(key, fp string) int {
	return min(s.cfg.maxResponse, s.cfg.docLimit-documentSize(s.cfg.collection, key, fp, 0))
}

// claimExtras bounds the storage size of the fields a claim may carry
// that an outcome does not: createdAt, heldUntil and leaseUntil
// (timestamps) and lockId (a 22-byte string).
var claimExtras = stringSize(fieldCreatedAt) + scalarSize + stringSize(fieldHeldUntil) + scalarSize +
	stringSize(fieldLeaseUntil) + scalarSize + stringSize(fieldLockID) + stringSize("0123456789012345678901")

// stepSize is the storage size step index adds to the steps field: its
// index (the map key), and its name and result under theirs.
func stepSize(index int, step store.Step) int {
	return stringSize(strconv.Itoa(index)) + stringSize(stepName) + stringSize(step.Name) + stringSize(stepResult) + len(step.Result)
}

// stepsSize is the storage size of steps in the steps field, but the
// field's own name.
func stepsSize(steps []store.Step) int {
	n := 0
	for i, s := range steps {
		n += stepSize(i, s)
	}
	return n
}

// claimSize bounds the storage size of the claim document of key with
// fingerprint fp and steps of stepBytes ([stepsSize]).
func claimSize(collection, key, fp string, stepBytes int) int {
	return documentSize(collection, key, fp, 0) + claimExtras + stringSize(fieldSteps) + stepBytes
}
