package redislock

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// A lock record is a string: the lock id (22 bytes), then the fence, the
// acquired-at and the expires-at times (15 zero-padded decimal digits each;
// times in Unix milliseconds by the server's clock, TIME), then the
// normalised key. A tombstone has the same header with tombstoneID for the
// id, zero times and no key: the fence alone, never live, found by no id.
//
// Every SET of a record carries PXAT max(expires-at, fence + 1), a
// tombstone's PXAT fence + 1: no record is removed before the server's
// clock has passed its fence (provider.KeepUntil), so the next fence,
// max(fence + 1, TIME in ms), is greater than every fence the key had.
//
// Replies never use Lua false (a null in RESP2, a boolean in RESP3):
// absence is an empty string or 0.
const (
	// recordHeader is the size of a record before its key.
	recordHeader = lock.IDLen + 3*lock.FenceDigits
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

// luaNow reads the server's clock, in Unix milliseconds, into now.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaRecordNow reads the server's clock, in Unix milliseconds, into now,
// given the record cur of KEYS[1] with its fence f and expiry e: every
// record carries PXAT max(e, f + 1), so the clock is that instant less the
// record's PTTL, to the millisecond (the server reckons both by the same
// clock). A PTTL is an integer, cheaper for a script than TIME's reply; a
// record without an expiry (an operator removed it) falls back to TIME.
const luaRecordNow = `
local now = redis.call('PTTL', KEYS[1])
if now >= 0 then
  local keep = e
  if keep <= f then
    keep = f + 1
  end
  now = keep - now
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// luaEnd ends the record cur of KEYS[1] (release, cleanup): deleted once the
// clock has passed its fence, else replaced by a tombstone that expires
// then.
const luaEnd = `
local f = tonumber(string.sub(cur, 23, 37))
if now > f then
  redis.call('DEL', KEYS[1])
elseif string.sub(cur, 1, 22) ~= '` + tombstoneID + `' then
  redis.call('SET', KEYS[1], '` + tombstoneID + `' .. string.sub(cur, 23, 37) .. '` + zeros30 + `', 'PXAT', f + 1)
end
`

// luaNotify tells the watchers of KEYS[1] that the lease with the id in
// ARGV[1] ended (see watch.go): a message on the channel named like the
// lock record, with PUBLISH, or SPUBLISH (sharded, on the record's own
// slot) on a cluster. A message without subscribers costs the server a
// dictionary lookup.
const luaNotify = `
redis.call('` + notifyPlaceholder + `', KEYS[1], ARGV[1])
`

const (
	zeros30           = "000000000000000000000000000000"
	notifyPlaceholder = "<notify>"
)

// scriptSet holds the scripts of one way of notifying watchers.
type scriptSet struct {
	acquire, release, extend, lookup, isLocked *redis.Script
}

// scriptsPlain publish with PUBLISH (a single node, Sentinel, a plain
// client on a cluster-mode endpoint); scriptsSharded with SPUBLISH (a
// cluster client, whose watchers listen on sharded channels).
var (
	scriptsPlain   = newScriptSet("PUBLISH")
	scriptsSharded = newScriptSet("SPUBLISH")
)

func newScriptSet(notify string) *scriptSet {
	sub := func(src string) *redis.Script {
		return redis.NewScript(strings.ReplaceAll(src, notifyPlaceholder, notify))
	}
	return &scriptSet{
		acquire:  redis.NewScript(acquireSrc),
		release:  sub(releaseSrc),
		extend:   sub(extendSrc),
		lookup:   redis.NewScript(lookupSrc),
		isLocked: sub(isLockedSrc),
	}
}

// acquireSrc: KEYS = lock record [, index hint]; ARGV = id, ttl ms,
// normalised key. It takes the lock unless a live lease holds it, and
// writes the id's index hint when it is given.
//
// The common case, a key with no record (never locked, or its last record
// gone: Redis removes a record only once the clock has passed its fence),
// costs TIME and one SET ... NX: the fence is the clock. Otherwise the
// record decides, as it is.
//
//	now                            acquired a key without a record: fence = acquired = now,
//	                               expires = now + ttl
//	{1, fence, acquired, expires}  acquired over an expired record or tombstone, or the live
//	                               lease already has this id (a retry after a lost reply
//	                               gets its lease back)
//	{0}                            a live lease holds the key; nothing written
//	{-1, fence}                    the next fence would exceed lock.FenceMax; nothing written
var acquireSrc = luaNow + `
if now > ` + fenceMax + ` then
  return {-1, now}
end
local exp = now + tonumber(ARGV[2])
local at, times = exp, nil
if now >= 1000000000000 and exp < 10000000000000 then
  -- 13 digits each (until 2286): Lua prints them exactly, cheaper than a format
  local n = '00' .. now
  at = tostring(exp)
  times = n .. n .. '00' .. at
else
  times = string.format('%015d%015d%015d', now, now, exp)
end
if redis.call('SET', KEYS[1], ARGV[1] .. times .. ARGV[3], 'NX', 'PXAT', at) then
  if KEYS[2] then
    redis.call('SET', KEYS[2], KEYS[1], 'PXAT', exp + ` + ms(hintSlack) + `)
  end
  return now
end
local cur = redis.call('GET', KEYS[1])
local e = tonumber(string.sub(cur, 53, 67))
if now < e then
  if string.sub(cur, 1, 22) == ARGV[1] then
    return {1, tonumber(string.sub(cur, 23, 37)), tonumber(string.sub(cur, 38, 52)), e}
  end
  return {0}
end
local f = tonumber(string.sub(cur, 23, 37)) + 1
if f < now then
  f = now
end
if f > ` + fenceMax + ` then
  return {-1, f}
end
local keep = exp
if keep <= f then
  keep = f + 1
end
redis.call('SET', KEYS[1], ARGV[1] .. string.format('%015d%015d%015d', f, now, exp) .. ARGV[3], 'PXAT', keep)
if KEYS[2] then
  redis.call('SET', KEYS[2], KEYS[1], 'PXAT', exp + ` + ms(hintSlack) + `)
end
return {1, f, now, exp}
`

// releaseSrc: KEYS = lock record [, index hint]; ARGV = id. 1 released
// (and the hint, when given, deleted), 0 not found (absent, a tombstone or
// another id), -1 expired (left as it is: it expires on its own). A
// release, and a release that finds the lease expired, notify watchers.
var releaseSrc = `
local cur = redis.call('GET', KEYS[1])
if not cur or string.find(cur, ARGV[1], 1, true) ~= 1 then
  return 0
end
local f = tonumber(string.sub(cur, 23, 37))
local e = tonumber(string.sub(cur, 53, 67))` + luaRecordNow + `if now >= e then` + indent(luaNotify) + `return -1
end
if now > f then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], '` + tombstoneID + `' .. string.sub(cur, 23, 37) .. '` + zeros30 + `', 'PXAT', f + 1)
end
if KEYS[2] then
  redis.call('DEL', KEYS[2])
end` + luaNotify + `return 1
`

// extendSrc: KEYS = lock record [, index hint]; ARGV = id, ttl ms. The new
// expiry (> 0) when extended, and then the hint lengthened to match (never
// shortened); 0 not found; -1 expired, which notifies watchers.
var extendSrc = `
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 22) ~= ARGV[1] then
  return 0
end` + luaNow + `
if now >= tonumber(string.sub(cur, 53, 67)) then` + indent(luaNotify) + `return -1
end
local exp = now + tonumber(ARGV[2])
local keep = exp
local f = tonumber(string.sub(cur, 23, 37))
if keep <= f then
  keep = f + 1
end
redis.call('SET', KEYS[1], string.sub(cur, 1, 52) .. string.format('%015d', exp) .. string.sub(cur, 68), 'PXAT', keep)
if KEYS[2] then
  redis.call('PEXPIREAT', KEYS[2], exp + ` + ms(hintSlack) + `, 'GT')
end
return exp
`

// lookupSrc: KEYS = lock record; ARGV = id, or an empty string for any.
// The record if it is live (and has this id), else an empty string.
var lookupSrc = `
local cur = redis.call('GET', KEYS[1])
if not cur or (ARGV[1] ~= '' and string.sub(cur, 1, 22) ~= ARGV[1]) then
  return ''
end` + luaNow + `
if now >= tonumber(string.sub(cur, 53, 67)) then
  return ''
end
return cur
`

// isLockedSrc: KEYS = lock record; ARGV = cleanup ('1' or '0'). 1 when a
// live lease holds the key, else 0. With cleanup, a record expired more
// than lock.CleanupGrace ago is ended as a release ends it, and watchers
// are notified.
var isLockedSrc = `
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end` + luaNow + `
local exp = tonumber(string.sub(cur, 53, 67))
if now < exp then
  return 1
end
if ARGV[1] == '1' and now - exp > ` + ms(lock.CleanupGrace) + ` then` + indent(luaEnd) + `redis.call('` + notifyPlaceholder + `', KEYS[1], string.sub(cur, 1, 22))
end
return 0
`

var fenceMax = strconv.FormatUint(uint64(lock.FenceMax), 10)

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
