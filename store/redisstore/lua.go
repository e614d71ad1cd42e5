package redisstore

import "github.com/idemkit/idemkit/lock/redislock"

// recordLua holds the record functions, written after redislock's library
// (whose now_ms they use). A record is a hash: m, the meta field (the state,
// then the fence, the created-at and the expires-at times in Unix
// milliseconds, 15 zero-padded digits each); p, the fingerprint; b, the
// response. It carries a PEXPIREAT of its expiry, so Redis deletes it when
// it runs out; visibility is still judged by the stored expiry against
// Redis's clock (visible while now < expiry).
//
//	record_get(rk) → {m, p, b} when live, else {}
//	record_put(rk, fence, ttlMs, state, fp, body) → 1 written, 0 refused (a live record with a higher fence)
//	record_delete(rk) → 1 when a live record was deleted, else 0
const recordLua = `
local function record_expires(m)
  return tonumber(string.sub(m, 32, 46))
end

local function record_get(rk)
  local v = redis.call('HMGET', rk, 'm', 'p', 'b')
  if not v[1] or now_ms() >= record_expires(v[1]) then
    return {}
  end
  return {v[1], v[2] or '', v[3] or ''}
end

local function record_put(rk, fence, ttl, state, fp, body)
  local now = now_ms()
  local m = redis.call('HGET', rk, 'm')
  if m and now < record_expires(m) and tonumber(string.sub(m, 2, 16)) > fence then
    return 0
  end
  local exp = now + ttl
  redis.call('HSET', rk, 'm', state .. string.format('%015d%015d%015d', fence, now, exp), 'p', fp, 'b', body)
  redis.call('PEXPIREAT', rk, string.format('%d', exp))
  return 1
end

local function record_delete(rk)
  local m = redis.call('HGET', rk, 'm')
  if not m then
    return 0
  end
  redis.call('DEL', rk)
  if now_ms() >= record_expires(m) then
    return 0
  end
  return 1
end
`

// The store's scripts. The combined ones follow redislock's conventions
// (see redislock.Locker.AcquireWith and ReleaseWith): the lock's keys and
// arguments first, the lock function's reply first.
var (
	getScript    = redislock.NewScript(recordLua + `return record_get(KEYS[1])`)
	putScript    = redislock.NewScript(recordLua + `return record_put(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5])`)
	deleteScript = redislock.NewScript(recordLua + `return record_delete(KEYS[1])`)

	// KEYS: the lock's three, then the record. ARGV: the lock's five.
	acquireGetScript = redislock.NewScript(recordLua + `
local r = lock_acquire_call()
if r[1] == 1 then
  return {r, record_get(KEYS[4])}
end
return {r}`)

	// KEYS: lock, record. ARGV: id, then record_put's arguments.
	putReleaseScript = redislock.NewScript(recordLua + `
local p = record_put(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6])
return {lock_release_call(), p}`)
)
