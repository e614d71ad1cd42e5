package redislock

import (
	"sync"
	"time"
)

// ownLeases maps the lock ids of the leases a Locker issued to their lock
// records, so that Release, Extend and LookupID by id need no index on the
// server for them. An entry leaves at the release of its lease through the
// Locker, or once the lease has certainly run out (by the local clock, a
// margin after its TTL from the moment it was granted or last extended),
// swept as entries are added: the table holds about as many entries as
// the Locker has live leases. It is split in shards by the id's first
// character (ids are random), so that concurrent acquires and releases
// rarely wait for each other.
type ownLeases struct {
	shards [ownShards]ownShard
}

const ownShards = 16

type ownShard struct {
	mu      sync.Mutex
	ids     map[string]ownLease
	untilGC int // adds before the next sweep
	_       [24]byte
}

type ownLease struct {
	key, name string
	// record is the lock record as the acquire wrote it when that was an
	// unwatched compact lease, which a release can then recognise whole;
	// empty for other forms, and once the lease was extended (an extend
	// rewrites it).
	record  string
	granted time.Time // when the acquire's reply came, by the local clock
	until   time.Time // the lease has certainly run out by then
}

// ownSlack is how long after its lease's TTL an entry is kept: more than
// any round trip, so that an entry never goes before its lease.
const ownSlack = 10 * time.Second

// minOwnSweep is the least number of adds to a shard between two sweeps of
// it.
const minOwnSweep = 256

func (o *ownLeases) shard(id string) *ownShard {
	return &o.shards[id[0]%ownShards]
}

// add records the lease id of key, whose lock record is name, granted for
// ttl; record is as ownLease has it.
func (o *ownLeases) add(id, key, name, record string, ttl time.Duration) {
	now := time.Now()
	sh := o.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.ids == nil {
		sh.ids = make(map[string]ownLease)
	}
	sh.ids[id] = ownLease{key: key, name: name, record: record, granted: now, until: now.Add(ttl + ownSlack)}
	sh.untilGC--
	if sh.untilGC > 0 {
		return
	}
	for id, e := range sh.ids {
		if now.After(e.until) {
			delete(sh.ids, id)
		}
	}
	sh.untilGC = max(minOwnSweep, len(sh.ids))
}

// get returns the entry of id's lease.
func (o *ownLeases) get(id string) (ownLease, bool) {
	sh := o.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.ids[id]
	if !ok || time.Now().After(e.until) {
		return ownLease{}, false
	}
	return e, true
}

// forKey returns the entry of id's lease when it was issued for key (it
// saves deriving the record's name again).
func (o *ownLeases) forKey(id, key string) (ownLease, bool) {
	sh := o.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.ids[id]
	if !ok || e.key != key {
		return ownLease{}, false
	}
	return e, true
}

// extend keeps id's entry for ttl more (the lease was just extended, and
// its record rewritten).
func (o *ownLeases) extend(id string, ttl time.Duration) {
	until := time.Now().Add(ttl + ownSlack)
	sh := o.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.ids[id]; ok {
		e.record = ""
		if until.After(e.until) {
			e.until = until
		}
		sh.ids[id] = e
	}
}

// remove removes id's entry: its lease was released, or is gone.
func (o *ownLeases) remove(id string) {
	sh := o.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.ids, id)
}
