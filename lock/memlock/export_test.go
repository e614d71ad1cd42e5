package memlock

import "github.com/idemkit/idemkit"

// Probes for the tests of the external test package.

func (l *Locker) Stored(key string) bool                       { return l.stored(key) }
func (l *Locker) Fence(key string) idemkit.Fence               { return l.fenceOf(key) }
func (l *Locker) RaiseFence(key string, f idemkit.Fence) error { return l.raiseFence(key, f) }
func (l *Locker) Unexpiring() []string                         { return l.unexpiring() }
func (l *Locker) Size() (entries, ids int)                     { return l.size() }

// Watched returns the number of keys with watchers.
func (l *Locker) Watched() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.watchers)
}

// MinSweep is the fewest acquires between two sweeps.
const MinSweep = minSweep
