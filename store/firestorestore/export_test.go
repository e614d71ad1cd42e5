package firestorestore

// DocID is the document id of a record key, for tests that look at the
// documents themselves.
func DocID(key string) string { return docID(key) }

// SetDocumentLimit sets the largest record document s writes, by its own
// count, so that a test can send Firestore a document its own count
// refuses and see how the store reports Firestore's refusal.
func SetDocumentLimit(s *Store, n int) { s.cfg.docLimit = n }

// The defaults and limits the options' documentation states, and the field
// of the TTL policy, for tests that check them.
const (
	DefaultCollection = defaultCollection
	MaxSweepBatch     = maxSweepBatch
	MaxDocumentBytes  = maxDocumentBytes
	DocumentMargin    = documentMargin
	FieldExpireAt     = fieldExpireAt
)

// MaxResponseBytes returns the largest response s accepts under key with
// fingerprint fp.
func MaxResponseBytes(s *Store, key, fp string) int { return max(s.maxResponse(key, fp), 0) }
