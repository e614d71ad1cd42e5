package redisstore

import (
	"strconv"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/redis/go-redis/v9"
)

// The store's one script. Every operation is a call of it on one key (the
// record's hash, so on one cluster slot), with the operation's name as
// ARGV[1] and the store's largest clock step in ms as ARGV[2]: one script
// means one NOSCRIPT miss per server at most, after which every call is an
// EVALSHA.
//
// A record is a hash (its fields: docs/backends.md): "released" and
// "deleted" are tombstones, invisible to get, claimable at once: a deleted
// record keeps its fence alone, a released claim its fields as they were. A record is live while it is a claim or an outcome
// and TIME < expires. Every write sets PEXPIREAT: for a claim, its lease
// plus the claim retention; for an outcome, its expiry; never before
// fence + 1 ms + the clock step (the fence rule of store.Store).
//
// Writes that add data start with HSET, which Redis refuses over
// maxmemory (OOM) before anything is written; extensions, releases and
// deletions start with PEXPIREAT, HDEL or DEL, which it allows, so that
// they go on then.
//
// A completion, a release and a deletion that ends a record notify the
// record's watchers in the same script: they publish the operation's name
// ("release <fence>" for a release) on the channel named like the
// record's key, with the command the last argument (notify) names:
// "publish" on a single node, "spublish" (sharded, so only the key's shard
// carries it) on a cluster, "" for none. The publication is a pcall: a
// server that refuses it (an ACL without the channel, a server without
// sharded pub/sub) fails the notification, never the operation, and its
// waiters poll.
//
// Replies (integers and strings; a record is state, fence, created,
// expires, fingerprint, response):
//
//	claim    fp ttl token        → {1, record} a new claim; {1, record, fp, response} a new claim that
//	                               took over a hash still holding a response (store.Record.Replaced);
//	                               {0, record} a live claim or an outcome; error FENCEMAX past idemkit.FenceMax
//	extend   fence ttl           → the new expiry, 0 not this live claim
//	complete fence ttl state fp response notify → 1 written (or this claim's identical outcome is there), 0 refused
//	release  fence notify        → 1 released, 0 not this live claim
//	get                          → {record} live, {} none
//	delete   notify              → 1 a live record was deleted, 0 none
//	put      fence ttl state fp response → 1 written, 0 refused (a live record with a higher fence)
var scriptText = `
local k = KEYS[1]
local op = ARGV[1]
local step = tonumber(ARGV[2])
local retention = ` + strconv.FormatInt(store.ClaimRetention.Milliseconds(), 10) + `

-- notify tells the key's watchers that the record changed (msg), by the
-- command the last argument names; a refused publication is ignored.
local function notify(msg)
  local cmd = ARGV[#ARGV]
  if cmd == 'publish' or cmd == 'spublish' then
    redis.pcall(cmd, k, msg)
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%d', n)
end

local function is_outcome(st)
  return st == 'completed' or st == 'not-replayable'
end

-- keep sets the key's expiry: at t, and never before the clock passes
-- fence + step.
local function keep(t, fence)
  redis.call('PEXPIREAT', k, fmt(math.max(t, fence + 1 + step)))
end

-- read returns state, fence (number), created, expires (number), fp,
-- token and, when asked (claim and get, which may return an outcome, so one
-- HMGET does), the response.
local function read(body)
  local v
  if body then
    v = redis.call('HMGET', k, 'state', 'fence', 'created', 'expires', 'fp', 'claim', 'response')
  else
    v = redis.call('HMGET', k, 'state', 'fence', 'created', 'expires', 'fp', 'claim')
  end
  return v[1], tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0, v[5] or '', v[6], v[7] or ''
end

local function live(st, exp, now)
  return (st == 'claimed' or is_outcome(st)) and now < exp
end

local function record(st, fence, created, exp, fp, body)
  if not is_outcome(st) then
    body = ''
  end
  return {st, fence, created, exp, fp, body}
end

-- tombstone ends the record, keeping its fence until the clock passes
-- fence + step.
local function tombstone(st, fence, now)
  redis.call('DEL', k)
  if now <= fence + step then
    redis.call('HSET', k, 'state', st, 'fence', fmt(fence), 'created', fmt(now))
    keep(0, fence)
  end
end

-- outcome writes an outcome over whatever the hash holds.
local function outcome(st, fence, ttl, fp, body, now)
  local exp = now + ttl
  redis.call('HSET', k, 'state', st, 'fence', fmt(fence), 'created', fmt(now), 'expires', fmt(exp), 'fp', fp)
  if body == '' then
    redis.call('HDEL', k, 'response', 'claim')
  else
    redis.call('HSET', k, 'response', body)
    redis.call('HDEL', k, 'claim')
  end
  return exp
end

local now = now_ms()
local st, fence, created, exp, fp, token, body = read(op == 'claim' or op == 'get')

if op == 'claim' then
  if is_outcome(st) and now < exp then
    return {0, record(st, fence, created, exp, fp, body)}
  end
  if st == 'claimed' and now < exp then
    if token == ARGV[5] then
      -- The client's retry after a lost reply: its own claim. The same
      -- expiry is written again, so that a wait for replicas after this
      -- reply covers the claim (WAIT counts the connection's own writes).
      keep(exp + retention, fence)
      return {1, record(st, fence, created, exp, fp, body)}
    end
    return {0, record(st, fence, created, exp, fp, body)}
  end
  local nf = math.max(fence + 1, now)
  if nf > ` + fenceMax + ` then
    return redis.error_reply('FENCEMAX the next fence would exceed idemkit.FenceMax')
  end
  local ne = now + tonumber(ARGV[4])
  redis.call('HSET', k, 'state', 'claimed', 'fence', fmt(nf), 'created', fmt(now), 'expires', fmt(ne), 'fp', ARGV[3], 'claim', ARGV[5])
  keep(ne + retention, nf)
  if body ~= '' then
    -- Whatever its state says, the hash held a response: the claim
    -- reports what it replaced.
    redis.call('HDEL', k, 'response')
    return {1, {'claimed', nf, now, ne, ARGV[3], ''}, fp, body}
  end
  return {1, {'claimed', nf, now, ne, ARGV[3], ''}}
end

if op == 'extend' then
  if st ~= 'claimed' or fmt(fence) ~= ARGV[3] or now >= exp then
    return 0
  end
  local ne = now + tonumber(ARGV[4])
  keep(ne + retention, fence)
  redis.call('HSET', k, 'expires', fmt(ne))
  return ne
end

if op == 'complete' then
  if fmt(fence) ~= ARGV[3] then
    return 0
  end
  if st == 'claimed' then
    local e = outcome(ARGV[5], fence, tonumber(ARGV[4]), ARGV[6], ARGV[7], now)
    keep(e, fence)
    notify(op)
    return 1
  end
  -- The claim's own outcome is there already: a completion retried after
  -- its reply was lost.
  if st == ARGV[5] and now < exp and fp == ARGV[6] and (redis.call('HGET', k, 'response') or '') == ARGV[7] then
    keep(exp, fence) -- the same expiry again: see the claim's retry
    return 1
  end
  return 0
end

if op == 'release' then
  if st ~= 'claimed' or fmt(fence) ~= ARGV[3] or now >= exp then
    return 0
  end
  -- The state marks the tombstone, and the key's expiry, set by the
  -- claim or its extension, is kept unless it comes before the fence
  -- rule's. The token goes first: HDEL is allowed over maxmemory, and a
  -- script that wrote may write on.
  redis.call('HDEL', k, 'claim')
  redis.call('HSET', k, 'state', 'released')
  if exp + retention < fence + 1 + step then
    keep(0, fence)
  end
  notify('release ' .. ARGV[3])
  return 1
end

if op == 'get' then
  if live(st, exp, now) then
    return record(st, fence, created, exp, fp, body)
  end
  return {}
end

if op == 'delete' then
  if not st or st == 'released' or st == 'deleted' then
    return 0
  end
  -- A claim whose lease ran out is ended too, so that it can no longer
  -- complete; only a live record counts as deleted.
  tombstone('deleted', fence, now)
  notify(op)
  if live(st, exp, now) then
    return 1
  end
  return 0
end

if op == 'put' then
  local nf = tonumber(ARGV[3])
  if live(st, exp, now) and fence > nf then
    return 0
  end
  local e = outcome(ARGV[5], nf, tonumber(ARGV[4]), ARGV[6], ARGV[7], now)
  keep(e, math.max(nf, fence))
  return 1
end

return redis.error_reply('ERR idemkit: unknown operation')
`

var script = redis.NewScript(scriptText)

var fenceMax = strconv.FormatUint(uint64(idemkit.FenceMax), 10)

// The script's SHA1 and source, boxed once for the EVALSHA (and EVAL)
// every call sends.
var scriptSHA, scriptSrc any = script.Hash(), scriptText
