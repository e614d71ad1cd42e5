package firestorestore

// DocID is the document id of a record key, for tests that look at the
// documents themselves.
func DocID(key string) string { return docID(key) }

// SetDocumentLimit sets the largest record document s writes, by its own
// count, so that a test can send Firestore a document its own count
// refuses and see how the store reports Firestore's refusal.
func SetDocumentLimit(s *Store, n int) { s.cfg.docLimit = n }
