package redisstore

import (
	"strconv"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/redis/go-redis/v9"
)

// The store's scripts: one per operation that decides on what the record
// holds (a claim of a key that is not free, an extension, a completion, a
// step, a release, a deletion, a put), each on one key (the record, so on one
// cluster slot), with the store's largest clock step in ms as ARGV[1].
// Claims of free keys, replays and reads need none (see Store.claim). The record's
// forms (see record.go) are parsed by read, and its time is the server's
// (TIME).
//
// Every write gives the key an absolute expiry: a claim its lease plus the
// claim retention, an outcome its expiry, and never before fence + 1 ms +
// the clock step (the fence rule of store.Store). A release keeps the
// claim's expiry, which covers the step by construction.
//
// Over maxmemory (OOM), Redis refuses the scripts that add data (claims,
// completions, steps, puts) before they run; the scripts of extensions, releases
// and deletions are flagged allow-oom, so that they go on then.
//
// A completion, a release and a deletion that ends a record notify the
// record's watchers in the same script: they publish the operation's name
// ("release <fence>" for a release) on the channel named like the record's
// key, with the command the last argument names: "publish" on a single
// node, "spublish" (sharded, so only the key's shard carries it) on a
// cluster, "" for none. The publication is a pcall: a server that refuses
// it (an ACL without the channel, a server without sharded pub/sub) fails
// the notification, never the operation, and its waiters poll.
var luaPrelude = `
local k = KEYS[1]
local step = tonumber(ARGV[1])
local retention = ` + retentionMs + `

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%d', n)
end

local function notify(msg)
  local cmd = ARGV[#ARGV]
  if cmd == 'publish' or cmd == 'spublish' then
    redis.pcall(cmd, k, msg)
  end
end

-- read returns the record: its form (nil: no key; c, s, o, n: a claim,
-- a claim with steps, a completed or not-replayable outcome; r, d, t: a
-- released or deleted record's tombstone, a released claim's with its
-- steps), fence, created, expires, fingerprint, claim token, the value,
-- where its response (or its steps) starts, and (for a claim, and t) the
-- key's expiry.
local function malformed()
  error({err = 'MALFORMED a malformed record in Redis'})
end

local function read()
  local v = redis.call('GET', k)
  if not v then
    return nil, 0, 0, 0
  end
  local t = string.sub(v, 1, 1)
  if t == 'c' or t == 's' then
    local e, p, c, tok, n, at = string.match(v, '^.(%-?%d+):(%d+):(%-?%d+):([^:]*):(%d+):()')
    if not e then
      malformed()
    end
    local ke = redis.call('PEXPIRETIME', k)
    local f = ke - tonumber(p)
    local fpend = at + tonumber(n)
    return t, f, f + tonumber(c), f + tonumber(e), string.sub(v, at, fpend - 1), tok, v, fpend, ke
  end
  if t == 't' then
    local f, n, at = string.match(v, '^t(%d+):(%d+):()')
    if not f then
      malformed()
    end
    local fpend = at + tonumber(n)
    return t, tonumber(f), 0, 0, string.sub(v, at, fpend - 1), nil, v, fpend, redis.call('PEXPIRETIME', k)
  end
  if t ~= 'o' and t ~= 'n' and t ~= 'r' and t ~= 'd' then
    malformed()
  end
  -- A tombstone is written as its fence alone; one made of an outcome by
  -- hand keeps the outcome's layout.
  local f, cr, ex, n, at = string.match(v, '^.(%d+):(%d+):(%d+):(%d+):()')
  if f then
    local fpend = at + tonumber(n)
    return t, tonumber(f), tonumber(cr), tonumber(ex), string.sub(v, at, fpend - 1), nil, v, fpend
  end
  f = tonumber(string.sub(v, 2))
  if (t ~= 'r' and t ~= 'd') or not f then
    malformed()
  end
  return t, f, 0, 0, '', nil, v, #v + 1
end

local function live(t, ex, now)
  return (t == 'c' or t == 'o' or t == 'n' or t == 's') and now < ex
end

-- keep_at is the key's expiry for one wanted at t: never before the
-- clock passes fence + step.
local function keep_at(t, fence)
  return math.max(t, fence + 1 + step)
end

-- set_claim writes a claim, its times relative to its fence and its key's
-- expiry, which it returns with the value. A claim with steps (their
-- encoding, as the value holds it after the fingerprint) is of form s, and
-- its key is kept at least until minke, what its steps were kept for.
local function set_claim(f, cr, ex, tok, fp, steps, minke)
  local ke = keep_at(ex + retention, f)
  local form = 'c'
  if steps then
    form, ke = 's', math.max(ke, minke)
  else
    steps = ''
  end
  local v = form .. fmt(ex - f) .. ':' .. fmt(ke - f) .. ':' .. fmt(cr - f) .. ':' .. tok .. ':' .. fmt(#fp) .. ':' .. fp .. steps
  redis.call('SET', k, v, 'PXAT', fmt(ke))
  return v, ke
end

local function set_outcome(t, f, cr, ex, fp, body, keepf)
  redis.call('SET', k, t .. fmt(f) .. ':' .. fmt(cr) .. ':' .. fmt(ex) .. ':' .. fmt(#fp) .. ':' .. fp .. body,
    'PXAT', fmt(keep_at(ex, keepf)))
end

local now = now_ms()
`

// claim fp ttl token → {claimed, value, key expiry[, replaced fp, replaced
// response]}: 1 a new claim (with what it replaced when it took over a
// record that held a response), or the client's own claim found again;
// 0 a live claim or outcome. A claim that takes over a claim with steps
// whose lease ran out, or the tombstone of one released, of the same
// fingerprint, carries the steps (and how long they are kept). Error
// FENCEMAX past idemkit.FenceMax.
var luaClaim = `
-- check_steps checks the steps of v from position at on (see record.go):
-- their count, then each step's name and result after its length, to the
-- end of v; a malformed record is an error, before anything is written.
local function check_steps(v, at)
  local c, p = string.match(v, '^(%d+):()', at)
  c = tonumber(c)
  if not c or c < 1 or c > ` + maxSteps + ` then
    malformed()
  end
  for i = 1, c do
    local n, q = string.match(v, '^(%d+):()', p)
    if not n or tonumber(n) < 1 then
      malformed()
    end
    local r, e = string.match(v, '^(%d+):()', q + tonumber(n))
    if not r then
      malformed()
    end
    p = e + tonumber(r)
  end
  if p ~= #v + 1 then
    malformed()
  end
end

local t, f, cr, ex, fp, tok, v, at, ke = read()
if live(t, ex, now) then
  if (t == 'c' or t == 's') and tok == ARGV[4] then
    -- The client's retry after a lost reply: its own claim. The same
    -- expiry is written again, so that a wait for replicas after this
    -- reply covers the claim (WAIT counts the connection's own writes).
    redis.call('PEXPIREAT', k, fmt(ke))
    return {1, v, ke}
  end
  return {0, v, ke or 0}
end
local nf = math.max(f + 1, now)
if nf > ` + fenceMax + ` then
  return redis.error_reply('FENCEMAX the next fence would exceed idemkit.FenceMax')
end
local steps
if (t == 's' or t == 't') and fp == ARGV[2] then
  check_steps(v, at)
  steps = string.sub(v, at)
end
local nv, nke = set_claim(nf, now, now + tonumber(ARGV[3]), ARGV[4], ARGV[2], steps, ke)
if t and t ~= 's' and t ~= 't' and at <= #v then
  -- Whatever its form says, the value held a response: the claim reports
  -- what it replaced.
  return {1, nv, nke, fp, string.sub(v, at)}
end
return {1, nv, nke}
`

// extend fence ttl → the new expiry; 0 not this live claim. A claim's
// steps stay, and so does how long they are kept.
const luaExtend = `
local t, f, cr, ex, fp, tok, v, at, ke = read()
if (t ~= 'c' and t ~= 's') or fmt(f) ~= ARGV[2] or now >= ex then
  return 0
end
local ne = now + tonumber(ARGV[3])
if t == 's' then
  set_claim(f, cr, ne, tok, fp, string.sub(v, at), ke)
else
  set_claim(f, cr, ne, tok, fp)
end
return ne
`

// complete fence ttl state fp response notify → 1 written (or this
// claim's identical outcome is there: a completion retried after its reply
// was lost), 0 refused. A claim whose lease ran out completes as long as
// nobody claimed the key since; the outcome drops the claim's steps. Every
// first execution runs it, so, like the release, it is written out alone;
// the clock is the key's expiry less what remains of it.
const luaComplete = `#!lua
local k = KEYS[1]
local v = redis.call('GET', k)
if not v then
  return 0
end
local t = string.sub(v, 1, 1)
local fence = tonumber(ARGV[2])
if t ~= 'c' and t ~= 'o' and t ~= 'n' and t ~= 'r' and t ~= 'd' and t ~= 's' and t ~= 't' then
  return redis.error_reply('MALFORMED a malformed record in Redis')
end
if t == 'c' or t == 's' then
  local p = string.match(v, '^.%-?%d+:(%d+):')
  if not p then
    return redis.error_reply('MALFORMED a malformed record in Redis')
  end
  local ke = redis.call('PEXPIRETIME', k)
  if ke - tonumber(p) ~= fence then
    return 0
  end
  local now = ke - redis.call('PTTL', k)
  local ex = now + tonumber(ARGV[3])
  local fp = ARGV[5]
  redis.call('SET', k, ARGV[4] .. ARGV[2] .. ':' .. string.format('%d', now) .. ':' .. string.format('%d', ex) .. ':' .. #fp .. ':' .. fp .. ARGV[6],
    'PXAT', string.format('%d', math.max(ex, fence + 1 + tonumber(ARGV[1]))))
  local cmd = ARGV[7]
  if cmd == 'publish' or cmd == 'spublish' then
    redis.pcall(cmd, k, 'complete')
  end
  return 1
end
if t ~= ARGV[4] then
  return 0
end
local f, cr, ex, n, at = string.match(v, '^.(%d+):(%d+):(%d+):(%d+):()')
if not f then
  return redis.error_reply('MALFORMED a malformed record in Redis')
end
if tonumber(f) ~= fence then
  return 0
end
local fpend = at + tonumber(n)
ex = tonumber(ex)
if redis.call('PEXPIRETIME', k) - redis.call('PTTL', k) < ex and string.sub(v, at, fpend - 1) == ARGV[5] and string.sub(v, fpend) == ARGV[6] then
  redis.call('PEXPIREAT', k, string.format('%d', math.max(ex, fence + 1 + tonumber(ARGV[1])))) -- the same expiry again: see the claim's retry
  return 1
end
return 0
`

// release fence notify → 1 released, 0 not this live claim. The
// tombstone keeps the claim's expiry: r<fence>, or for a claim with steps
// t<fence> with its fingerprint and steps, for the next claim of its
// fingerprint. Every lock cycle runs it, so it is written out alone,
// without the prelude's functions, and reads the clock (PTTL) only for a
// claim of its fence.
const luaRelease = `#!lua flags=allow-oom
local k = KEYS[1]
local v = redis.call('GET', k)
if not v then
  return 0
end
local t = string.sub(v, 1, 1)
if t ~= 'c' and t ~= 's' then
  return 0
end
local e, p, at = string.match(v, '^.(%-?%d+):(%d+):()')
if not e then
  return redis.error_reply('MALFORMED a malformed record in Redis')
end
p = tonumber(p)
if redis.call('PEXPIRETIME', k) - p ~= tonumber(ARGV[2]) then
  return 0
end
-- Live while the key's time left (PTTL, by the server's clock) exceeds
-- what it is kept past the lease.
if redis.call('PTTL', k) <= p - tonumber(e) then
  return 0
end
if t == 'c' then
  redis.call('SET', k, 'r' .. ARGV[2], 'KEEPTTL')
else
  local fp = string.match(v, '^%-?%d+:[^:]*:()', at) -- past created and token
  if not fp then
    return redis.error_reply('MALFORMED a malformed record in Redis')
  end
  redis.call('SET', k, 't' .. ARGV[2] .. ':' .. string.sub(v, fp), 'KEEPTTL')
end
local cmd = ARGV[3]
if cmd == 'publish' or cmd == 'spublish' then
  redis.pcall(cmd, k, 'release ' .. ARGV[2])
end
return 1
`

// delete notify → 1 a live record was deleted, 0 none. A claim whose lease
// ran out is ended too, so that it can no longer complete, and a released
// claim's steps go (its tombstone t becomes d).
const luaDelete = `
local t, f, cr, ex = read()
if not t or t == 'r' or t == 'd' then
  return 0
end
if now <= f + step then
  redis.call('SET', k, 'd' .. fmt(f), 'PXAT', fmt(f + 1 + step))
else
  redis.call('DEL', k)
end
notify('delete')
if live(t, ex, now) then
  return 1
end
return 0
`

// put fence ttl state fp response → 1 written, 0 refused (a live record
// with a higher fence).
const luaPut = `
local t, f, cr, ex = read()
local nf = tonumber(ARGV[2])
if live(t, ex, now) and f > nf then
  return 0
end
set_outcome(ARGV[4], nf, now, now + tonumber(ARGV[3]), ARGV[5], ARGV[6], math.max(nf, f))
return 1
`

// step fence index name result keep → 1 recorded (or this very step is
// the claim's last: a RecordStep retried after its reply was lost), 0
// refused: step number index (from 0) appended to the claim fence (whose
// lease may have run out) only while it holds exactly index steps. The key
// is kept at least keep ms from now (never less than it was), and the
// claim's keep moves with it, so that fence = PEXPIRETIME − keep still
// holds. Every step runs it, so, like the completion, it is written out
// alone; the clock is the key's expiry less what remains of it.
const luaStep = `#!lua
local k = KEYS[1]
local v = redis.call('GET', k)
if not v then
  return 0
end
local t = string.sub(v, 1, 1)
if t ~= 'c' and t ~= 's' then
  if t ~= 'o' and t ~= 'n' and t ~= 'r' and t ~= 'd' and t ~= 't' then
    return redis.error_reply('MALFORMED a malformed record in Redis')
  end
  return 0
end
local e, p, at = string.match(v, '^.(%-?%d+):(%d+):()')
local n, fp
if e then
  n, fp = string.match(v, '^%-?%d+:[^:]*:(%d+):()', at)
end
if not n then
  return redis.error_reply('MALFORMED a malformed record in Redis')
end
local ke = redis.call('PEXPIRETIME', k)
local fence = tonumber(ARGV[2])
if ke - tonumber(p) ~= fence then
  return 0
end
local fpend = fp + tonumber(n)
local count, steps = 0, fpend
if t == 's' then
  local c, s = string.match(v, '^(%d+):()', fpend)
  if not c then
    return redis.error_reply('MALFORMED a malformed record in Redis')
  end
  count, steps = tonumber(c), s
elseif fpend <= #v then
  -- A claim of form c holds nothing after its fingerprint.
  return redis.error_reply('MALFORMED a malformed record in Redis')
end
local index, name, result = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local step = string.format('%d', #name) .. ':' .. name .. string.format('%d', #result) .. ':' .. result
if count ~= index then
  if count ~= index + 1 then
    return 0
  end
  -- Is the last step this one?
  local last = steps
  for i = 1, count - 1 do
    local n, q = string.match(v, '^(%d+):()', last)
    local r, s
    if n then
      r, s = string.match(v, '^(%d+):()', q + tonumber(n))
    end
    if not r then
      return redis.error_reply('MALFORMED a malformed record in Redis')
    end
    last = s + tonumber(r)
  end
  if string.sub(v, last) ~= step then
    return 0
  end
  redis.call('PEXPIREAT', k, string.format('%d', ke)) -- the same expiry again: see the claim's retry
  return 1
end
local nke = math.max(ke, ke - redis.call('PTTL', k) + tonumber(ARGV[6]))
redis.call('SET', k, 's' .. e .. ':' .. string.format('%d', nke - fence) .. ':' .. string.sub(v, at, fpend - 1) ..
  string.format('%d', count + 1) .. ':' .. string.sub(v, steps) .. step,
  'PXAT', string.format('%d', nke))
return 1
`

// luaRead reads a record without a transaction, for a server over its
// maxmemory, which refuses every command queued in a MULTI: GET,
// PEXPIRETIME and PTTL, as a transaction reads them.
const luaRead = `#!lua flags=no-writes
return {redis.call('GET', KEYS[1]), redis.call('PEXPIRETIME', KEYS[1]), redis.call('PTTL', KEYS[1])}
`

// luaScript is one of the store's scripts: its SHA1 and source, boxed
// once for the EVALSHA (and EVAL) every call sends.
type luaScript struct {
	sha, src any
	name     string // the operation
	// acked: a write that counts only once acknowledged when the store
	// waits for replicas or fsyncs (WithWaitForReplicas, WithWaitForAOF).
	acked bool
}

// newScript returns the script of op: the prelude and body, flagged
// allow-oom when oom is set. Every script declares its flags (a shebang
// line), which Redis runs with less set-up than a script without: one that
// may write and lacks allow-oom is refused as a whole over maxmemory.
func newScript(op, body string, oom bool) *luaScript {
	src := "#!lua\n" + luaPrelude + body
	if oom {
		src = "#!lua flags=allow-oom\n" + luaPrelude + body
	}
	return &luaScript{sha: redis.NewScript(src).Hash(), src: src, name: op}
}

// alone returns the script of op whose source src is written out alone,
// without the prelude (and declares its flags itself).
func alone(op, src string) *luaScript {
	return &luaScript{sha: redis.NewScript(src).Hash(), src: src, name: op}
}

// ackedScript marks sc as a write that waits for acknowledgements.
func ackedScript(sc *luaScript) *luaScript {
	sc.acked = true
	return sc
}

var (
	scriptClaim    = newScript("claim", luaClaim, false)
	scriptExtend   = ackedScript(newScript("extend", luaExtend, true))
	scriptComplete = ackedScript(alone("complete", luaComplete))
	scriptStep     = ackedScript(alone("record-step", luaStep))
	scriptRelease  = alone("release", luaRelease)
	scriptDelete   = newScript("delete", luaDelete, true)
	scriptPut      = ackedScript(newScript("put", luaPut, false))
	scriptRead     = alone("read", luaRead)
	scripts        = []*luaScript{scriptClaim, scriptExtend, scriptComplete, scriptStep, scriptRelease, scriptDelete, scriptPut, scriptRead}
)

var (
	fenceMax    = strconv.FormatUint(uint64(idemkit.FenceMax), 10)
	retentionMs = strconv.FormatInt(store.ClaimRetention.Milliseconds(), 10)
	maxSteps    = strconv.Itoa(store.MaxSteps)
)
