package memstore

import "github.com/idemkit/idemkit"

// Immortal returns the keys of s whose entries the sweep would never
// remove: no keep-until time, or one so far off (over ten years) that it
// stands for none.
func Immortal(s *Store) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	horizon := s.now().AddDate(10, 0, 0)
	var keys []string
	for k, e := range s.entries {
		if until := e.keepUntil(); until.IsZero() || until.After(horizon) {
			keys = append(keys, k)
		}
	}
	return keys
}

// Len returns the number of keys s keeps: live records, and expired ones
// not yet swept.
func Len(s *Store) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries)
}

// Usage returns what s holds against its limits: the keys it keeps and the
// bytes they count against [WithMaxBytes].
func Usage(s *Store) (entries, bytes int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries), s.bytes
}

// Watched returns how many keys of s have a watch, and how many watches the
// key k has.
func Watched(s *Store, k string) (keys, watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[k]; w != nil {
		watches = w.n
	}
	return len(s.watches), watches
}

// Floor returns the highest fence of a record s removed.
func Floor(s *Store) idemkit.Fence {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.floor
}

// Indexed returns the number of lock ids s indexes.
func Indexed(s *Store) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byID)
}

// RaiseFence raises s's floor to f: every key's next fence is above it.
func RaiseFence(s *Store, f idemkit.Fence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = max(s.floor, f)
}

// FenceOf returns the fence of the record s keeps under k, live or expired
// and not yet swept, or 0.
func FenceOf(s *Store, k string) (idemkit.Fence, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.entries[k]; e != nil {
		return e.rec.Fence, true
	}
	return 0, false
}
