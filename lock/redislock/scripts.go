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

// luaEnd ends the record cur of KEYS[1] (release, cleanup): deleted once the
// clock has passed its fence, else replaced by a tombstone that expires
// then.
const luaEnd = `
local f = tonumber(string.sub(cur, 23, 37))
if now > f then
  redis.call('DEL', KEYS[1])
elseif string.sub(cur, 1, 22) ~= '` + tombstoneID + `' then
  redis.call('SET', KEYS[1], '` + tombstoneID + `' .. string.sub(cur, 23, 37) .. '` + zeros30 + `', 'PXAT', string.format('%d', f + 1))
end
`

const zeros30 = "000000000000000000000000000000"

// acquireScript: KEYS = lock record [, index hint]; ARGV = id, ttl ms,
// normalised key. It takes the lock unless a live lease holds it, and
// writes the id's index hint when it is given.
//
//	{1, fence, acquired, expires}  acquired (also when the live lease already has this id:
//	                               a retry after a lost reply gets its lease back)
//	{0}                            a live lease holds the key; nothing written
//	{-1, fence}                    the next fence would exceed lock.FenceMax; nothing written
var acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])` + luaNow + `
local f = 1
if cur then
  local exp = tonumber(string.sub(cur, 53, 67))
  if now < exp then
    if string.sub(cur, 1, 22) == ARGV[1] then
      return {1, tonumber(string.sub(cur, 23, 37)), tonumber(string.sub(cur, 38, 52)), exp}
    end
    return {0}
  end
  f = tonumber(string.sub(cur, 23, 37)) + 1
end
if f < now then
  f = now
end
if f > ` + strconv.FormatUint(uint64(lock.FenceMax), 10) + ` then
  return {-1, f}
end
local exp = now + tonumber(ARGV[2])
local keep = exp
if keep <= f then
  keep = f + 1
end
redis.call('SET', KEYS[1], ARGV[1] .. string.format('%015d%015d%015d', f, now, exp) .. ARGV[3], 'PXAT', string.format('%d', keep))
if KEYS[2] then
  redis.call('SET', KEYS[2], KEYS[1], 'PXAT', string.format('%d', exp + ` + ms(hintSlack) + `))
end
return {1, f, now, exp}
`)

// releaseScript: KEYS = lock record; ARGV = id. 1 released, 0 not found
// (absent, a tombstone or another id), -1 expired (left as it is: it
// expires on its own).
var releaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 22) ~= ARGV[1] then
  return 0
end` + luaNow + `
if now >= tonumber(string.sub(cur, 53, 67)) then
  return -1
end` + luaEnd + `
return 1
`)

// extendScript: KEYS = lock record [, index hint]; ARGV = id, ttl ms. The
// new expiry (> 0) when extended, and then the hint lengthened to match
// (never shortened); 0 not found; -1 expired.
var extendScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 22) ~= ARGV[1] then
  return 0
end` + luaNow + `
if now >= tonumber(string.sub(cur, 53, 67)) then
  return -1
end
local exp = now + tonumber(ARGV[2])
local keep = exp
local f = tonumber(string.sub(cur, 23, 37))
if keep <= f then
  keep = f + 1
end
redis.call('SET', KEYS[1], string.sub(cur, 1, 52) .. string.format('%015d', exp) .. string.sub(cur, 68), 'PXAT', string.format('%d', keep))
if KEYS[2] then
  redis.call('PEXPIREAT', KEYS[2], string.format('%d', exp + ` + ms(hintSlack) + `), 'GT')
end
return exp
`)

// lookupScript: KEYS = lock record; ARGV = id, or an empty string for any.
// The record if it is live (and has this id), else an empty string.
var lookupScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur or (ARGV[1] ~= '' and string.sub(cur, 1, 22) ~= ARGV[1]) then
  return ''
end` + luaNow + `
if now >= tonumber(string.sub(cur, 53, 67)) then
  return ''
end
return cur
`)

// isLockedScript: KEYS = lock record; ARGV = cleanup ('1' or '0'). 1 when
// a live lease holds the key, else 0. With cleanup, a record expired more
// than lock.CleanupGrace ago is ended as a release ends it.
var isLockedScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end` + luaNow + `
local exp = tonumber(string.sub(cur, 53, 67))
if now < exp then
  return 1
end
if ARGV[1] == '1' and now - exp > ` + ms(lock.CleanupGrace) + ` then` + indent(luaEnd) + `end
return 0
`)

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
