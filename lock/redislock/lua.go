package redislock

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Lua is the library of the lock's operations, as Lua local functions that
// every script of this package (and of a store co-located with the locks)
// starts with, so the lock semantics are written once. Time is Redis's own
// (TIME), in milliseconds; a lease is live while now < its expiry.
//
// A lock record is a string: the lock id (22 bytes), the fence, the
// acquired-at and the expires-at times (15 zero-padded decimal digits each;
// times in Unix milliseconds), then the normalised user key. It carries a
// PXAT of its expiry, so Redis deletes it when it runs out; liveness is
// still judged by the stored expiry.
//
// Replies never use Lua false (a null in RESP2, a boolean in RESP3): absence
// is an empty string or 0. The functions, each touching only the keys it is
// given:
//
//	now_ms() → the server time in milliseconds
//	lock_acquire(lockKey, fenceKey, id, ttlMs, key, fenceMax, indexKey)
//	    → {1, fence, acquiredAt, expiresAt}  acquired (also when the live lock already has this id);
//	                                         the id's index hint is written too unless indexKey is ''
//	    → {0}                                a live lease holds the key; nothing written
//	    → {-1, counter}                      the next fence would exceed fenceMax; nothing written
//	lock_acquire_call() → lock_acquire with the arguments of [Locker.AcquireWith]'s convention
//	lock_release(lockKey, id) → 1 released, 0 not found (absent or another id), -2 expired
//	lock_release_call() → lock_release with the arguments of [Locker.ReleaseWith]'s convention
//	lock_extend(lockKey, id, ttlMs) → {1, expiresAt} | {0} not found | {-2} expired
//	lock_lookup(lockKey, id) → the record if live (and held by id, unless id is ''), else ''
//	lock_is_locked(lockKey, cleanup, graceMs) → 1 or 0; with cleanup = '1' it deletes a record
//	    expired more than graceMs ago (never the fence counter)
const Lua = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function lock_expires(v)
  return tonumber(string.sub(v, 53, 67))
end

local function lock_acquire(lk, fk, id, ttl, key, max, ik)
  local now = now_ms()
  local v = redis.call('MGET', lk, fk)
  local cur = v[1]
  if cur then
    local exp = lock_expires(cur)
    if now < exp then
      if string.sub(cur, 1, 22) == id then
        return {1, tonumber(string.sub(cur, 23, 37)), tonumber(string.sub(cur, 38, 52)), exp}
      end
      return {0}
    end
  end
  local f = tonumber(v[2] or '0')
  if f >= max then
    return {-1, f}
  end
  f = f + 1
  redis.call('SET', fk, f)
  local exp = now + ttl
  redis.call('SET', lk, id .. string.format('%015d%015d%015d', f, now, exp) .. key, 'PXAT', string.format('%d', exp))
  if ik ~= '' then
    redis.call('SET', ik, lk, 'PXAT', string.format('%d', exp + 1000))
  end
  return {1, f, now, exp}
end

local function lock_release(lk, id)
  local cur = redis.call('GET', lk)
  if not cur or string.sub(cur, 1, 22) ~= id then
    return 0
  end
  if now_ms() >= lock_expires(cur) then
    return -2
  end
  redis.call('DEL', lk)
  return 1
end

local function lock_extend(lk, id, ttl)
  local cur = redis.call('GET', lk)
  if not cur or string.sub(cur, 1, 22) ~= id then
    return {0}
  end
  local now = now_ms()
  if now >= lock_expires(cur) then
    return {-2}
  end
  local exp = now + ttl
  redis.call('SET', lk, string.sub(cur, 1, 52) .. string.format('%015d', exp) .. string.sub(cur, 68), 'PXAT', string.format('%d', exp))
  return {1, exp}
end

local function lock_lookup(lk, id)
  local cur = redis.call('GET', lk)
  if not cur or (id ~= '' and string.sub(cur, 1, 22) ~= id) then
    return ''
  end
  if now_ms() >= lock_expires(cur) then
    return ''
  end
  return cur
end

local function lock_is_locked(lk, cleanup, grace)
  local cur = redis.call('GET', lk)
  if not cur then
    return 0
  end
  local now = now_ms()
  local exp = lock_expires(cur)
  if now < exp then
    return 1
  end
  if cleanup == '1' and now - exp > grace then
    redis.call('DEL', lk)
  end
  return 0
end

local function lock_acquire_call()
  local ik = ''
  if ARGV[5] == '1' then
    ik = KEYS[3]
  end
  return lock_acquire(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ik)
end

local function lock_release_call()
  return lock_release(KEYS[1], ARGV[1])
end
`

// Script is a Lua script whose source is the library [Lua] followed by a
// body. It runs by SHA (EVALSHA), falling back to EVAL when the server does
// not have it cached (after a restart or SCRIPT FLUSH).
type Script struct {
	s *redis.Script
}

// NewScript returns the script made of body and the functions of the
// library [Lua] that body uses (directly or through other library
// functions), in library order. The body calls the library's functions;
// every key it touches must be declared in KEYS and, for Redis Cluster,
// share one hash slot.
//
// Leaving out the functions a script does not use matters: Redis runs the
// whole script on every call, and defining a dozen closures it never calls
// costs more than the redis.call()s of an acquire.
func NewScript(body string) *Script {
	return &Script{s: redis.NewScript(librarySubset(body) + body)}
}

// libraryFunctions is [Lua] split into its top-level functions, in order.
var libraryFunctions = func() []libraryFunction {
	var fns []libraryFunction
	for _, chunk := range strings.Split(Lua, "\nlocal function ")[1:] {
		name := chunk[:strings.IndexByte(chunk, '(')]
		fns = append(fns, libraryFunction{name: name, src: "\nlocal function " + chunk})
	}
	return fns
}()

type libraryFunction struct{ name, src string }

// librarySubset returns the library functions that text calls, and those
// they call in turn, in library order.
func librarySubset(text string) string {
	used := make([]bool, len(libraryFunctions))
	for grown := true; grown; {
		grown = false
		for i, f := range libraryFunctions {
			if !used[i] && calls(text, f.name) {
				used[i], grown = true, true
				text += f.src
			}
		}
	}
	var b strings.Builder
	for i, f := range libraryFunctions {
		if used[i] {
			b.WriteString(f.src)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// calls reports whether text calls the function name: name followed by
// "(" and not preceded by an identifier character.
func calls(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name+"(")
		if j < 0 {
			return false
		}
		j += i
		if j == 0 || !isIdent(text[j-1]) {
			return true
		}
		i = j + 1
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Run runs the script on c with keys and args: EVALSHA, then EVAL if the
// server does not have the script cached. It is for a co-located store's
// scripts that take no lock (a plain record read or write); scripts that
// acquire or release go through [Locker.AcquireWith] and
// [Locker.ReleaseWith].
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.s.Run(ctx, c, keys, args...)
}

// The lock's own scripts. Each returns its library call's reply as the
// first element of an array, as [Locker.AcquireWith] and
// [Locker.ReleaseWith] expect of every script.
var (
	acquireScript  = NewScript(`return {lock_acquire_call()}`)
	releaseScript  = NewScript(`return {lock_release_call()}`)
	extendScript   = NewScript(`return lock_extend(KEYS[1], ARGV[1], tonumber(ARGV[2]))`)
	lookupScript   = NewScript(`return lock_lookup(KEYS[1], ARGV[1])`)
	isLockedScript = NewScript(`return lock_is_locked(KEYS[1], ARGV[1], tonumber(ARGV[2]))`)
)
