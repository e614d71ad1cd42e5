package redisstore

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Lister = (*Store)(nil)

// Bounds of one List call's work: the keys one SCAN step asks for (a hint
// to Redis) and the most steps one page takes, so that a page over a large
// keyspace with few matches ends (with a cursor) instead of scanning it all.
const (
	listScanCount = 200
	listMaxSteps  = 64
)

// List implements [store.Lister]: SCAN with a MATCH pattern (the store's
// key prefix and prefix, glob characters escaped) on each master in turn
// (a cluster's masters in the order of their addresses), and one pipeline
// per step to read the matching records, judged by
// the server's clock. The records come in no particular order. A page
// stops after a bounded part of the keyspace, so it may hold fewer than
// limit records while its cursor goes on. A record whose key is stored
// hashed (longer than 512 bytes, not valid UTF-8, with control
// characters, or starting with '@') is not listed: its key is not in
// Redis. The cursor names a master by its address: a cursor made before a
// failover or a resharding is refused (InvalidArgument); list again. A
// record may be shown twice: SCAN may return a key again (while Redis
// resizes its table), and only the keys of one step are deduplicated.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]store.Record, string, error) {
	const op = "list"
	if err := engine.ValidateList(limit); err != nil {
		return nil, "", err
	}
	cur, err := parseListCursor(after)
	if err != nil {
		return nil, "", err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, "", err
	}
	nodes, err := s.masters(ctx)
	if err != nil {
		return nil, "", mapError(op, err)
	}
	i := 0
	if after != "" {
		i = slices.IndexFunc(nodes, func(n master) bool { return n.addr == cur.node })
		if i < 0 {
			return nil, "", idemkit.NewError(idemkit.CodeInvalidArgument, op,
				"the cursor names a Redis node that is no longer a master of the store (a failover or resharding since): list again from the start", nil)
		}
	}
	pattern := escapeGlob(s.prefix+prefix) + "*"
	var recs []store.Record
	for steps := 0; i < len(nodes); {
		n := nodes[i]
		if steps == listMaxSteps {
			return recs, listCursor{node: n.addr, scan: cur.scan, last: cur.last}.String(), nil
		}
		steps++
		keys, nextScan, err := n.client.Scan(ctx, cur.scan, pattern, listScanCount).Result()
		if err != nil {
			return nil, "", mapError(op, err)
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		if cur.last != "" {
			// The step this cursor stopped in, again: skip what it listed.
			keys = keys[sortedAfter(keys, cur.last):]
		}
		page, last, err := s.readListed(ctx, n.client, keys, limit-len(recs))
		if err != nil {
			return nil, "", err
		}
		recs = append(recs, page...)
		if last != "" {
			// The page filled up within this step.
			return recs, listCursor{node: n.addr, scan: cur.scan, last: last}.String(), nil
		}
		cur = listCursor{scan: nextScan}
		if nextScan == 0 {
			i++
		}
		if len(recs) == limit && i < len(nodes) {
			return recs, listCursor{node: nodes[i].addr, scan: cur.scan}.String(), nil
		}
	}
	return recs, "", nil
}

// readListed reads the live records under the Redis keys (sorted), at most
// want of them, in one pipeline (each key's value, expiry and what remains
// of it in a transaction of its own); last is the Redis key of the
// last one read when more keys remained, else "". A key that holds
// something else than a record (another application's, under the prefix)
// is skipped.
func (s *Store) readListed(ctx context.Context, c redis.Cmdable, keys []string, want int) (recs []store.Record, last string, err error) {
	const op = "list"
	type item struct {
		key  string // the record key
		exec *redis.Cmd
	}
	var items []item
	for _, rk := range keys {
		k, ok := strings.CutPrefix(rk, s.prefix)
		if !ok || !verbatim(k) {
			continue // a hashed key: its record key is not in Redis
		}
		items = append(items, item{key: k})
	}
	if len(items) == 0 {
		return nil, "", nil
	}
	pipe := c.Pipeline()
	for i := range items {
		rk := any(s.redisKey(items[i].key))
		keep, left := readCmds(ctx, rk)
		items[i].exec = redis.NewCmd(ctx, argsExec...)
		for _, cmd := range []redis.Cmder{redis.NewCmd(ctx, argsMulti...), redis.NewCmd(ctx, "get", rk), keep, left, items[i].exec} {
			_ = pipe.Process(ctx, cmd)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, "", mapError(op, err)
	}
	for _, it := range items {
		vals, ok := it.exec.Val().([]any)
		if !ok || len(vals) != 3 {
			return nil, "", replyError(op)
		}
		if _, ok := vals[0].(string); !ok {
			continue // gone since the scan (nil), or not a string
		}
		cur, now, found, err := decodeRead(op, it.key, vals)
		if err != nil || !found || !cur.live(now) {
			continue // not a record, or not live
		}
		if len(recs) == want {
			return recs, s.redisKey(recs[len(recs)-1].Key), nil
		}
		recs = append(recs, cur.rec)
	}
	return recs, "", nil
}

// sortedAfter returns the index of the first of the sorted keys above k.
func sortedAfter(keys []string, k string) int {
	i, found := slices.BinarySearch(keys, k)
	if found {
		i++
	}
	return i
}

// master is one node List scans.
type master struct {
	addr   string // "" for a client of one server
	client redis.Cmdable
}

// masters returns the nodes that hold the store's keys: a cluster's (or a
// ring's) masters in the order of their addresses, or the client itself.
func (s *Store) masters(ctx context.Context) ([]master, error) {
	var (
		mu    sync.Mutex
		nodes []master
	)
	collect := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, master{addr: c.Options().Addr, client: c})
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, collect)
	case *redis.Ring:
		err = c.ForEachShard(ctx, collect)
	default:
		return []master{{client: s.client}}, nil
	}
	slices.SortFunc(nodes, func(a, b master) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// listCursor is where a listing goes on: the master, its SCAN cursor, and
// the last Redis key listed of the step that cursor starts (or "").
type listCursor struct {
	node string
	scan uint64
	last string
}

// String encodes c: the unpadded base64url of its fields joined by NUL,
// which no verbatim key holds.
func (c listCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.node + "\x00" + strconv.FormatUint(c.scan, 10) + "\x00" + c.last))
}

func parseListCursor(s string) (listCursor, error) {
	if s == "" {
		return listCursor{}, nil
	}
	bad := idemkit.NewError(idemkit.CodeInvalidArgument, "list", "the cursor is not one this store made", nil)
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listCursor{}, bad
	}
	parts := strings.SplitN(string(b), "\x00", 3)
	if len(parts) != 3 {
		return listCursor{}, bad
	}
	scan, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return listCursor{}, bad
	}
	return listCursor{node: parts[0], scan: scan, last: parts[2]}, nil
}

// escapeGlob escapes the characters a MATCH pattern gives a meaning.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
