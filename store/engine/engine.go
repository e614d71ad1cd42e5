// Package engine holds what the authors of store engines share and users
// of stores never need: the argument checks the [store.Store] contract asks
// of every operation before any I/O, the error for a response too large for
// the backend, the retries of a statement with the one back-off, the
// background sweeper of engines that delete expired records in batches,
// and the form of the lock ids a
// [github.com/idemkit/idemkit/lock.Finder] indexes. Every engine of this
// repository uses it, and an engine of your own can too.
package engine

// IDLen is the length of a lock id: 16 random bytes in unpadded base64url.
const IDLen = 22

// LockID reports whether s has the form of a lock id: exactly [IDLen]
// characters of the base64url alphabet (A-Z a-z 0-9 - _). An engine that
// implements lock.Finder may index only the claims whose fingerprint is
// one, so the index costs the guard's own writes nothing (a guard's
// fingerprint never has this form).
func LockID(s string) bool {
	if len(s) != IDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
