package firestorestore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

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

// Listening is what the snapshot listeners of a store are doing.
type Listening struct {
	Running int                 // listeners whose goroutine has not ended (their streams open or closing)
	Started int                 // listeners started so far
	Applied int                 // snapshots the listeners took in so far
	Watches map[string]int      // by record key with a running listener: its watches not yet stopped
	Ready   map[string]struct{} // the record keys whose listener has delivered its first snapshot
}

// Listeners returns what the snapshot listeners of s are doing.
func Listeners(s *Store) Listening {
	ls := &s.listeners
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := Listening{Running: ls.running, Started: ls.started, Applied: ls.applied, Watches: map[string]int{}, Ready: map[string]struct{}{}}
	for k, kl := range ls.m {
		l.Watches[k] = kl.n
		if kl.ok {
			l.Ready[k] = struct{}{}
		}
	}
	return l
}

// Waiting returns how many watches the listeners serve in all, and the
// fewest any of them serves (0 without listeners).
func (l Listening) Waiting() (total, fewest int) {
	for _, n := range l.Watches {
		if total == 0 || n < fewest {
			fewest = n
		}
		total += n
	}
	return total, fewest
}

// SetListenerLinger sets how long the listeners of s outlive their last
// watch (default 5 s), so that tests that wait for listeners to end need
// not wait that long.
func SetListenerLinger(s *Store, d time.Duration) { s.cfg.linger = d }

// RaiseFence leaves a tombstone of fence f under key, as a release of a
// claim with that fence would: the next claim of key gets a greater one.
func RaiseFence(ctx context.Context, s *Store, key string, f idemkit.Fence) error {
	_, err := s.ref(key).Set(ctx, s.tombstone(key, f, newWriteID()).data())
	return err
}

// Stored reads the document of key: the fence it carries (0 without one)
// and whether it holds a record, live or run out (a tombstone does not).
func Stored(ctx context.Context, s *Store, key string) (fence idemkit.Fence, record bool, err error) {
	d, err := s.read(ctx, "test", key, s.ref(key))
	if err != nil || !d.exists {
		return 0, false, err
	}
	return d.fence, d.state != released, nil
}
