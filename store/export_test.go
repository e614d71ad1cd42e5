package store

import "time"

// SetSealClock sets the local clock with which the sealed store s times
// its claims (time.Now by default).
func SetSealClock(s Store, now func() time.Time) {
	if sl, ok := sealedUnder(s); ok {
		sl.now = now
	}
}
