package firestorestore

import "unicode/utf8"

// Size limits.
const (
	// maxDocumentBytes is Firestore's limit on a document's size (1 MiB),
	// counted as Firestore counts storage size: the document name, each
	// field's name and value, and 32 bytes.
	maxDocumentBytes = 1 << 20
	// documentMargin is how far below maxDocumentBytes the store keeps
	// every record document, by its own count, so that a small difference
	// in how a Firestore release counts never turns into a failed write.
	documentMargin = 1 << 10
)

// Firestore's storage-size rules, as its documentation states them and
// as the emulator enforces them (it accepts a document of exactly
// maxDocumentBytes by this count and refuses one byte more):
//
//	string (ids, field names, values)   UTF-8 bytes + 1
//	bytes                               their length
//	integer, timestamp                  8
//	document name                       each collection id and document id in its path, + 16
//	document                            its name + each field's name and value + 32
const (
	nameOverhead     = 16
	documentOverhead = 32
	scalarSize       = 8
)

// stringSize is the storage size of a string.
func stringSize(s string) int { return len(s) + 1 }

// textSize is the storage size of [text] of s: a string when s is valid
// UTF-8, else bytes.
func textSize(s string) int {
	if utf8.ValidString(s) {
		return stringSize(s)
	}
	return len(s)
}

// documentSize is the storage size of the record document that holds an
// outcome with a response of n bytes under key with fingerprint fp, in
// collection.
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

// maxResponse is the largest response [Store.Complete] and [Store.Put]
// accept under key with fingerprint fp: the configured maximum
// ([WithMaxResponseBytes]), or less when the record document would
// otherwise come within documentMargin of Firestore's maxDocumentBytes, by
// Firestore's own count (the record key, the fingerprint, the collection
// name and the fixed fields take their share). It is negative when not
// even an empty response fits (a fingerprint of a megabyte).
func (s *Store) maxResponse(key, fp string) int {
	return min(s.cfg.maxResponse, s.cfg.docLimit-documentSize(s.cfg.collection, key, fp, 0))
}
