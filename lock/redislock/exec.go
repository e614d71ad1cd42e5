package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// cleanupTimeout bounds the release of a lease that an acquire could not
// hand out (its fence was not acknowledged, or its index hint not written).
const cleanupTimeout = 5 * time.Second

// AcquireWith is [Locker.Acquire] through script, which may do more on the
// lock's slot in the same round trip: it is how a store co-located with the
// locks reads a record under a new lease. The script is called with
//
//	KEYS = lock record, fence counter, index hint (or the lock record again), keys...
//	ARGV = lock id, TTL in ms, normalised key, lock.FenceMax, write-hint flag, args...
//
// and must return an array whose first element is the reply of
// lock_acquire_call() (see [Lua]), which reads the first three keys and
// five arguments; the elements after it are returned as extra, untouched.
// Every key in keys must carry the same hash tag as the lock (see [Tag]),
// so that the script stays on one cluster slot; anything else is an
// InvalidArgument error before any I/O.
//
// Everything else is Acquire's: validation, the id's index hint, the
// durability wait, fence warnings and error mapping. extra is nil unless
// the lease was acquired.
func (l *Locker) AcquireWith(ctx context.Context, script *Script, key string, ttl time.Duration, keys []string, args ...any) (lease lock.Lease, ok bool, extra []any, err error) {
	const op = "acquire"
	key, err = lock.NormalizeKey(key)
	if err != nil {
		return lock.Lease{}, false, nil, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Lease{}, false, nil, err
	}
	if err := sameTag(op, key, keys); err != nil {
		return lock.Lease{}, false, nil, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Lease{}, false, nil, err
	}
	lease, ok, extra, err = l.acquireWith(ctx, script, key, ttl, keys, args)
	if err != nil && l.cluster == nil && !l.crossSlot.Load() && redis.HasErrorPrefix(err, "CROSSSLOT") {
		// A plain client on a cluster-mode endpoint (a proxy, a one-shard
		// cluster): the script ran nothing. Keep every script on one slot
		// from now on and try again.
		l.crossSlot.Store(true)
		lease, ok, extra, err = l.acquireWith(ctx, script, key, ttl, keys, args)
	}
	return lease, ok, extra, err
}

func (l *Locker) acquireWith(ctx context.Context, script *Script, key string, ttl time.Duration, keys []string, args []any) (lock.Lease, bool, []any, error) {
	const op = "acquire"
	id := lock.NewID()
	name, index := l.layout.Lock(key), l.layout.Index(id)
	// The index hint goes into the script, written only when the lease is
	// granted, unless the deployment keeps every script on one slot (a
	// cluster): there it lives on another slot, and is written by a command
	// of its own once the lease is granted, so that a refused attempt
	// writes nothing.
	inScript := l.cluster == nil && !l.crossSlot.Load()
	third, flag := name, "0"
	if inScript {
		third, flag = index, "1"
	}
	allKeys := make([]string, 0, 3+len(keys))
	allKeys = append(append(allKeys, name, l.layout.Fence(key), third), keys...)
	allArgs := make([]any, 0, 5+len(args))
	allArgs = append(append(allArgs, id, ttl.Milliseconds(), key, uint64(lock.FenceMax), flag), args...)

	var (
		cmd  *redis.Cmd
		conn *redis.Conn
		err  error
	)
	if l.wait != waitNone {
		// WAIT counts the writes of one connection: the script runs on a
		// dedicated connection to the lock's master, and the wait follows
		// on it.
		conn, err = l.lockConn(ctx, name)
		if err != nil {
			return lock.Lease{}, false, nil, MapError(op, err)
		}
		defer conn.Close()
		cmd = script.s.Run(ctx, conn, allKeys, allArgs...)
	} else {
		cmd = script.s.Run(ctx, l.client, allKeys, allArgs...)
	}
	if err := cmd.Err(); err != nil {
		return lock.Lease{}, false, nil, MapError(op, err)
	}
	reply, ok := cmd.Val().([]any)
	if !ok || len(reply) == 0 {
		return lock.Lease{}, false, nil, replyError(op, "acquire")
	}
	lease, ok, err := l.acquired(ctx, key, id, reply[0])
	if err != nil || !ok {
		return lock.Lease{}, false, nil, err
	}
	if !inScript {
		// The hint goes through the client, which routes it to its own
		// slot; it need not be durable (it is only a hint).
		err = MapError(op, l.client.Set(ctx, index, name, ttl+hintSlack).Err())
	}
	if err == nil && conn != nil {
		err = l.durable(ctx, conn)
	}
	if err != nil {
		// The lease cannot be handed out: give it back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, _, _ = l.releaseName(rctx, "release", releaseScript, name, id, nil, nil)
		cancel()
		return lock.Lease{}, false, nil, err
	}
	return lease, true, reply[1:], nil
}

// acquired decodes lock_acquire's reply.
func (l *Locker) acquired(ctx context.Context, key, id string, v any) (lock.Lease, bool, error) {
	const op = "acquire"
	r, ok := v.([]any)
	if !ok || len(r) == 0 {
		return lock.Lease{}, false, replyError(op, "acquire")
	}
	nums := make([]int64, len(r))
	for i, x := range r {
		n, ok := x.(int64)
		if !ok {
			return lock.Lease{}, false, replyError(op, "acquire")
		}
		nums[i] = n
	}
	switch {
	case nums[0] == 1 && len(nums) == 4 && nums[1] > 0:
		fence := lock.Fence(nums[1])
		if err := lock.CheckFence(ctx, l.logger, l.hasher, key, fence); err != nil {
			return lock.Lease{}, false, err
		}
		return lock.Lease{Key: key, ID: id, Fence: fence, AcquiredAt: time.UnixMilli(nums[2]), ExpiresAt: time.UnixMilli(nums[3])}, true, nil
	case nums[0] == 0 && len(nums) == 1:
		return lock.Lease{}, false, nil
	case nums[0] == -1 && len(nums) == 2 && nums[1] >= 0:
		// The script refused before writing anything; CheckFence gives the
		// overflow error (and never a raw key).
		if err := lock.CheckFence(ctx, l.logger, l.hasher, key, lock.Fence(nums[1])+1); err != nil {
			return lock.Lease{}, false, err
		}
	}
	return lock.Lease{}, false, replyError(op, "acquire")
}

// durable waits until the acquire's writes are acknowledged as the
// durability option asks. conn must be the connection the acquire script
// ran on: WAIT and WAITAOF count that connection's writes.
func (l *Locker) durable(ctx context.Context, conn *redis.Conn) error {
	const op = "acquire"
	switch l.wait {
	case waitReplicas:
		n, err := conn.Wait(ctx, l.waitN, l.waitFor).Result()
		if err != nil {
			return MapError(op, err)
		}
		if n < int64(l.waitN) {
			return idemkit.NewError(idemkit.CodeServiceUnavailable, op, fmt.Sprintf("the fence was acknowledged by %d of %d replicas in time; the lease was given back", n, l.waitN), nil)
		}
	case waitAOF:
		acks, err := conn.WaitAOF(ctx, l.local, l.waitN, l.waitFor).Result()
		if err != nil {
			return MapError(op, err)
		}
		if len(acks) != 2 || acks[0] < int64(l.local) || acks[1] < int64(l.waitN) {
			return idemkit.NewError(idemkit.CodeServiceUnavailable, op, fmt.Sprintf("the fence was not fsynced as asked in time (acknowledged %v); the lease was given back", acks), nil)
		}
	}
	return nil
}

// lockConn returns a dedicated connection to the master that holds name,
// for a script followed by WAIT or WAITAOF on the same connection.
func (l *Locker) lockConn(ctx context.Context, name string) (*redis.Conn, error) {
	if l.cluster != nil {
		node, err := l.cluster.MasterForKey(ctx, name)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	c, ok := l.client.(*redis.Client)
	if !ok {
		return nil, fmt.Errorf("redislock: no dedicated connection on a %T", l.client)
	}
	return c.Conn(), nil
}

// ReleaseWith is [Locker.ReleaseKey] through script, which may do more on
// the lock's slot in the same round trip: it is how a co-located store
// writes a record and releases the lease at once. The script is called with
//
//	KEYS = lock record, keys...
//	ARGV = lock id, args...
//
// and must return an array whose first element is the reply of
// lock_release_call(), that is lock_release(KEYS[1], ARGV[1]) (see [Lua]); the elements after it are
// returned as extra, untouched. Every key in keys must carry the lock's
// hash tag (InvalidArgument otherwise, before any I/O).
func (l *Locker) ReleaseWith(ctx context.Context, script *Script, key, id string, keys []string, args ...any) (out lock.Outcome, extra []any, err error) {
	const op = "release"
	key, err = lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, nil, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, nil, err
	}
	if err := sameTag(op, key, keys); err != nil {
		return lock.Outcome{}, nil, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, nil, err
	}
	return l.releaseName(ctx, op, script, l.layout.Lock(key), id, keys, args)
}

// releaseName runs a release script on the lock record name.
func (l *Locker) releaseName(ctx context.Context, op string, script *Script, name, id string, keys []string, args []any) (lock.Outcome, []any, error) {
	allKeys := make([]string, 0, 1+len(keys))
	allKeys = append(append(allKeys, name), keys...)
	allArgs := make([]any, 0, 1+len(args))
	allArgs = append(append(allArgs, id), args...)
	v, err := script.s.Run(ctx, l.client, allKeys, allArgs...).Result()
	if err != nil {
		return lock.Outcome{}, nil, MapError(op, err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return lock.Outcome{}, nil, replyError(op, "release")
	}
	code, _ := reply[0].(int64)
	switch code {
	case 1:
		return lock.Outcome{OK: true}, reply[1:], nil
	case 0:
		return lock.Outcome{Reason: lock.ReasonNotFound}, reply[1:], nil
	case -2:
		return lock.Outcome{Reason: lock.ReasonExpired}, reply[1:], nil
	}
	return lock.Outcome{}, nil, replyError(op, "release")
}

// pipelined runs script and, in the same pipeline (one round trip on one
// node), the commands that more adds. When the server does not have the
// script cached (NOSCRIPT: nothing ran), it runs the pipeline again with
// the script's source.
func (l *Locker) pipelined(ctx context.Context, script *Script, keys []string, args []any, more func(redis.Pipeliner)) (*redis.Cmd, error) {
	for _, bySHA := range [...]bool{true, false} {
		pipe := l.client.Pipeline()
		var cmd *redis.Cmd
		if bySHA {
			cmd = script.s.EvalSha(ctx, pipe, keys, args...)
		} else {
			cmd = script.s.Eval(ctx, pipe, keys, args...)
		}
		more(pipe)
		_, _ = pipe.Exec(ctx) // each command carries its own error
		if bySHA && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			continue
		}
		return cmd, cmd.Err()
	}
	return nil, replyError("script", "NOSCRIPT after loading the script")
}

// sameTag checks that every key carries the hash tag of the lock on key.
func sameTag(op, key string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	tag := Tag(key)
	for _, k := range keys {
		if t, ok := HashTag(k); !ok || t != tag {
			return idemkit.NewError(idemkit.CodeInvalidArgument, op, "every key of a combined script must carry the lock's hash tag", nil)
		}
	}
	return nil
}
