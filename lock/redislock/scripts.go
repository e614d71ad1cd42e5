package redislock

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// A lock record is a string: the lock id (22 bytes), a kind byte, then
// what the kind holds (decimals are 15 zero-padded digits; times are Unix
// milliseconds by the server's clock):
//
//	c  a lease as the acquire of a free key writes it (SET ... NX PX ttl):
//	   its TTL, then the normalised key, or nothing when the record's name
//	   spells the key (see names.keyOf). The record's own expiry is the
//	   lease's, and its fence (and acquired-at) is that expiry less the
//	   TTL: the server's clock when the lease was granted. Such a record
//	   that exists holds a live lease, and the acquire that writes it
//	   formats no number.
//	f  a lease written by an acquire over an existing record, or by an
//	   extend: fence, acquired-at, expires-at, then the key (or nothing, as
//	   for c). It expires at max(expires-at, fence + 1).
//	t  a tombstone, under tombstoneID: the fence alone. It expires at
//	   fence + 1.
//	r  a light tombstone, under tombstoneID and nothing more: a c lease
//	   released when its fence's millisecond may not have passed, for 1 ms
//	   (SET ... PX 1: no number formatted). Its lease's fence was at most
//	   the clock at that write, so a lease that takes over gets the clock
//	   + 1.
//
// The lease kinds in upper case (C, F) are watched: some Locker waits for
// the lease to end, so the script that ends it publishes a message; a
// lease nobody watches ends without one (see watch.go).
//
// No record is removed before the server's clock has passed its fence
// (provider.KeepUntil), so the next fence, max(fence + 1, the clock), is
// greater than every fence the key had.
//
// Replies never use Lua false (a null in RESP2, a boolean in RESP3):
// absence is an empty string or 0.
const (
	// idLen is the size of a lock id at the start of a record.
	idLen = lock.IDLen
	// compactHeader is the size of a compact lease before its key.
	compactHeader = idLen + 1 + idemkit.FenceDigits
	// fullHeader is the size of a full lease before its key.
	fullHeader = idLen + 1 + 3*idemkit.FenceDigits
	// tombstoneID stands for the id in a tombstone: '.' is not in the
	// base64url alphabet, so no lock id (validated before any I/O) is equal
	// to it.
	tombstoneID = "......................"
	// hintSlack is how much longer than its lease an index hint lives, so
	// that clock differences between cluster nodes never let a live lease's
	// hint expire first. A hint that outlives its lease is harmless: every
	// operation through it checks the id and liveness on the lock record.
	hintSlack = time.Second
)

// The kinds of a compact lease, as the acquire writes them.
const (
	kindCompact        = 'c'
	kindCompactWatched = 'C'
)

// luaPrelude defines what every script that reads a record shares:
//
//	clock()       the server's clock (TIME) in Unix ms
//	lease(cur)    a lease record's fence, acquired-at and expires-at, and
//	              where its key starts; a compact lease reads its expiry
//	              (PEXPIRETIME: an integer, no string to parse). A compact
//	              lease whose expiry an operator removed has run out, with
//	              fence 0: nothing says more.
//	malformed()   the error reply for a record this package did not write
//	watched(k)    whether kind k is a watched lease
var luaPrelude = `
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function malformed()
  return redis.error_reply('ERR malformed lock record')
end
local function watched(k)
  return k == 67 or k == 70
end
local function lease(cur)
  local k = string.byte(cur, 23)
  if (k == 99 or k == 67) and #cur >= 38 then
    local e = redis.call('PEXPIRETIME', KEYS[1])
    if e < 0 then
      return 0, 0, -1, 39
    end
    local f = e - tonumber(string.sub(cur, 24, 38))
    return f, f, e, 39
  end
  if (k == 102 or k == 70) and #cur >= 68 then
    return tonumber(string.sub(cur, 24, 38)), tonumber(string.sub(cur, 39, 53)), tonumber(string.sub(cur, 54, 68)), 69
  end
  return nil
end
`

// luaEnd ends the lease record cur of KEYS[1] with fence f at the clock now
// (release, cleanup): deleted once the clock has passed the fence, else
// replaced by a tombstone that expires then (and r is 2).
const luaEnd = `
if now > f then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], '` + tombstoneID + `t' .. string.format('%015d', f), 'PXAT', f + 1)
  r = 2
end
`

// luaNotify tells the watchers of KEYS[1] that the lease with the id in
// ARGV[1] ended (see watch.go): a message on the channel named like the
// lock record, with PUBLISH, or SPUBLISH (sharded, on the record's own
// slot) on a cluster.
const luaNotify = `
redis.call('` + notifyPlaceholder + `', KEYS[1], ARGV[1])
`

const notifyPlaceholder = "<notify>"

// scriptSet holds the scripts of one way of notifying watchers.
type scriptSet struct {
	acquire, release         *evalScript
	extend, lookup, isLocked *redis.Script
}

// evalScript is a script that [Locker.runScript] runs (those of an
// acquire and a release, which every lock cycle runs), with its SHA1 and
// source boxed once, for the EVALSHA (and the EVAL) it sends.
type evalScript struct {
	sha, src any
}

func newEvalScript(src string) *evalScript {
	return &evalScript{sha: redis.NewScript(src).Hash(), src: src}
}

// args starts the arguments of the script's EVALSHA on nkeys keys, with
// room for n more: the keys, then the script's arguments.
func (s *evalScript) args(nkeys, n int) []any {
	a := make([]any, 3, 3+n)
	a[0], a[1], a[2] = "evalsha", s.sha, nkeys
	return a
}

// scriptsPlain publish with PUBLISH (a single node, Sentinel, a plain
// client on a cluster-mode endpoint); scriptsSharded with SPUBLISH (a
// cluster client, whose watchers listen on sharded channels).
var (
	scriptsPlain   = newScriptSet("PUBLISH")
	scriptsSharded = newScriptSet("SPUBLISH")
)

func newScriptSet(notify string) *scriptSet {
	sub := func(src string) string { return strings.ReplaceAll(src, notifyPlaceholder, notify) }
	return &scriptSet{
		acquire:  newEvalScript(sub(acquireSrc)),
		release:  newEvalScript(sub(releaseSrc)),
		extend:   redis.NewScript(sub(extendSrc)),
		lookup:   redis.NewScript(sub(lookupSrc)),
		isLocked: redis.NewScript(sub(isLockedSrc)),
	}
}

// acquireSrc: KEYS = lock record [, index hint]; ARGV = the compact lease
// to write (see below), its TTL in ms [, the index hint's TTL in ms]. It
// takes the lock unless a live lease holds it, and writes the id's index
// hint when it is given. The compact lease holds the caller's lock id and
// kind: upper case (watched) when the caller's Locker watches the key, so
// that its end wakes the other processes' watchers too, and a refused
// attempt then marks the live lease watched.
//
// The common case, a key with no record (never locked, or its last record
// gone: Redis removes a record only once the clock has passed its fence),
// is one SET ... NX PX and a PEXPIRETIME: the fence is the server's clock
// at the SET, the expiry less the TTL. Otherwise the record decides, as it
// is.
//
//	expiry                         acquired a key without a record: fence = acquired =
//	                               expiry - ttl
//	{1, fence, acquired, expires}  acquired over an expired lease or tombstone, or the live
//	                               lease already has this id (a retry after a lost reply
//	                               gets its lease back; its expiry is written again,
//	                               unchanged, so that a WAIT on the retry's connection
//	                               covers the lease)
//	{0}                            a live lease holds the key
//	{-1, fence}                    the next fence would exceed idemkit.FenceMax; nothing kept
var acquireSrc = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local e = redis.call('PEXPIRETIME', KEYS[1])
  if e > ` + fenceMax + ` and e - tonumber(ARGV[2]) > ` + fenceMax + ` then
    redis.call('DEL', KEYS[1])
    return {-1, e - tonumber(ARGV[2])}
  end
  if KEYS[2] then
    redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[3])
  end
  return e
end` + luaPrelude + `local cur = redis.call('GET', KEYS[1])
local k = string.byte(cur, 23)
local now = clock()
local f
local wk = string.byte(ARGV[1], 23) == 67 and 'F' or 'f'
if k == 116 and #cur == 38 then
  f = tonumber(string.sub(cur, 24, 38)) + 1
elseif k == 114 and #cur == 23 then
  -- A light tombstone: its lease's fence was at most the clock then.
  f = now + 1
else
  local a, e
  f, a, e = lease(cur)
  if not f then
    return malformed()
  end
  if now < e then
    if string.sub(cur, 1, 22) == string.sub(ARGV[1], 1, 22) then
      -- A retry after a lost reply: the expiry is written again, as it is,
      -- so that the retry writes and a WAIT on its connection covers the
      -- lease.
      local keep = e
      if keep <= f then
        keep = f + 1
      end
      redis.call('PEXPIREAT', KEYS[1], keep)
      return {1, f, a, e}
    end
    if string.byte(ARGV[1], 23) == 67 and not watched(k) then
      redis.call('SETRANGE', KEYS[1], 22, string.upper(string.char(k)))
    end
    return {0}
  end
  -- The lease ran out: its watchers wait for the next one too.
  f = f + 1
  if watched(k) then
    wk = 'F'
  end
end
if f < now then
  f = now
end
if f > ` + fenceMax + ` then
  return {-1, f}
end
local exp = now + tonumber(ARGV[2])
local keep = exp
if keep <= f then
  keep = f + 1
end
redis.call('SET', KEYS[1], string.sub(ARGV[1], 1, 22) .. wk .. string.format('%015d%015d%015d', f, now, exp) .. string.sub(ARGV[1], 39), 'PXAT', keep)
if KEYS[2] then
  redis.call('SET', KEYS[2], KEYS[1], 'PXAT', exp + ` + ms(hintSlack) + `)
end
return {1, f, now, exp}
`

// releaseSrc: KEYS = lock record [, index hint]; ARGV = id [, what the
// caller knows of the lease's fence: '1' the server's clock has passed it
// (the Locker saw the lease granted over 2 ms ago), '0' it may not have
// (the Locker saw it granted less than 2 ms ago) [, the unwatched compact
// lease as the caller's acquire wrote it, when no hint is given]]. 1
// released (and the hint, when given, deleted), 2 released and left as a
// tombstone, 0 not found (absent, a tombstone or another id), -1 expired
// (left as it is: it expires on its own). A release of a watched lease,
// and a release that finds a watched lease expired, notify its watchers.
//
// A compact lease is live since it exists, and its fence is at most the
// clock. So a release of one the caller knows is behind the clock is a GET
// and a DEL, and of one the caller just got, a GET and a write of a light
// tombstone for 1 ms (see acquireSrc), reading nothing more. When the
// record is the unwatched compact lease the caller wrote, byte for byte,
// nothing of it needs decoding (it is this id's, live, and notifies
// nobody). Otherwise its fence is behind the clock exactly when its PTTL
// is below its TTL (then DEL); within the fence's millisecond the record
// becomes a light tombstone.
var releaseSrc = `
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[3] then
  if ARGV[2] == '1' then
    redis.call('DEL', KEYS[1])
    return 1
  end
  redis.call('SET', KEYS[1], '` + tombstoneID + `r', 'PX', '1')
  return 2
end
if not cur or string.sub(cur, 1, 22) ~= ARGV[1] then
  return 0
end
local k = string.byte(cur, 23)
local r = 1
if (k == 99 or k == 67) and #cur >= 38 then
  if ARGV[2] == '1' then
    redis.call('DEL', KEYS[1])
  elseif ARGV[2] == '0' then
    redis.call('SET', KEYS[1], '` + tombstoneID + `r', 'PX', '1')
    r = 2
  else
    local left = redis.call('PTTL', KEYS[1])
    if left < 0 then` + indent(indent(`
if k == 67 then`+indent(luaNotify)+`end
return -1`)) + `
    end
    if left < tonumber(string.sub(cur, 24, 38)) then
      redis.call('DEL', KEYS[1])
    else
      redis.call('SET', KEYS[1], '` + tombstoneID + `r', 'PX', '1')
      r = 2
    end
  end
else` + indent(luaPrelude) + `local f, a, e = lease(cur)
  if not f then
    return malformed()
  end
  local now = clock()
  if now >= e then` + indent(`
if k == 70 then`+indent(luaNotify)+`end
return -1`) + `
  end` + indent(luaEnd) + `
end
if KEYS[2] then
  redis.call('DEL', KEYS[2])
end
if k == 67 or k == 70 then` + indent(luaNotify) + `end
return r
`

// extendSrc: KEYS = lock record [, index hint]; ARGV = id, ttl ms. The new
// expiry (> 0) when extended, and then the hint lengthened to match (never
// shortened); 0 not found; -1 expired, which notifies watchers. An
// extended lease is stored in full, watched if it was.
var extendSrc = luaPrelude + `
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 22) ~= ARGV[1] then
  return 0
end
local k = string.byte(cur, 23)
local f, a, e, ks = lease(cur)
if not f then
  return malformed()
end
local now = clock()
if now >= e then
  if watched(k) then` + indent(indent(luaNotify)) + `end
  return -1
end
local exp = now + tonumber(ARGV[2])
local keep = exp
if keep <= f then
  keep = f + 1
end
local wk = watched(k) and 'F' or 'f'
redis.call('SET', KEYS[1], ARGV[1] .. wk .. string.format('%015d%015d%015d', f, a, exp) .. string.sub(cur, ks), 'PXAT', keep)
if KEYS[2] then
  redis.call('PEXPIREAT', KEYS[2], exp + ` + ms(hintSlack) + `, 'GT')
end
return exp
`

// lookupSrc: KEYS = lock record; ARGV = id, or an empty string for any.
// The live lease (with this id) in full form (id, kind, fence, acquired-at,
// expires-at, key), else an empty string.
var lookupSrc = luaPrelude + `
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 22) == '` + tombstoneID + `' or (ARGV[1] ~= '' and string.sub(cur, 1, 22) ~= ARGV[1]) then
  return ''
end
local f, a, e, ks = lease(cur)
if not f then
  return malformed()
end
if clock() >= e then
  return ''
end
return string.sub(cur, 1, 23) .. string.format('%015d%015d%015d', f, a, e) .. string.sub(cur, ks)
`

// isLockedSrc: KEYS = lock record; ARGV = cleanup ('1' or '0'), mark ('1'
// or '0'). 1 when a live lease holds the key, else 0. With mark (a Watch's
// look at the key), a live lease is marked watched. With cleanup, a lease
// expired more than lock.CleanupGrace ago (or whose expiry was removed) is
// ended as a release ends it, and its watchers are notified.
var isLockedSrc = luaPrelude + `
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local k = string.byte(cur, 23)
if string.sub(cur, 1, 22) == '` + tombstoneID + `' then
  return 0
end
local f, a, e = lease(cur)
if not f then
  return malformed()
end
local now = clock()
if now < e then
  if ARGV[2] == '1' and not watched(k) then
    redis.call('SETRANGE', KEYS[1], 22, string.upper(string.char(k)))
  end
  return 1
end
local r
if ARGV[1] == '1' and (e < 0 or now - e > ` + ms(lock.CleanupGrace) + `) then` + indent(luaEnd) + `redis.call('` + notifyPlaceholder + `', KEYS[1], string.sub(cur, 1, 22))
end
return 0
`

var fenceMax = strconv.FormatUint(uint64(idemkit.FenceMax), 10)

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
