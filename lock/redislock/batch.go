package redislock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultInflight is the default of [WithMaxInflight].
const defaultInflight = 4

// batcher sends the commands of a Locker's concurrent calls together. A
// call sends its commands at once, in a round trip of their own, while
// fewer than limit such round trips are in flight; beyond that it queues
// them, and the next round trip that comes back takes the whole queue with
// it in one pipeline. So a lone call costs what it would cost alone, and
// under load the server reads, runs and answers many calls' commands per
// round trip (Redis spends most of a small command's time in reading and
// writing sockets).
type batcher struct {
	client redis.UniversalClient
	limit  int // 0: every call sends its own commands

	pipes sync.Pool // of the client's redis.Pipeliner, empty

	mu      sync.Mutex
	sending int // round trips in flight
	queue   []*batched
}

// batched is the commands of one queued call.
type batched struct {
	ctx  context.Context
	cmds []redis.Cmder
	done chan struct{} // closed when err and the commands' results are set
	err  error
}

// do sends cmds, in order and in one pipeline, and returns the first error
// among their results (redis.Nil included), as a pipeline's Exec does.
// When it returns an error that is neither nil nor redis.Nil the caller
// must not read the commands: when ctx ended while they were queued, they
// may still be sent.
func (b *batcher) do(ctx context.Context, cmds ...redis.Cmder) error {
	b.mu.Lock()
	if b.limit == 0 || b.sending < b.limit {
		b.sending++
		b.mu.Unlock()
		err := b.send(ctx, cmds)
		b.next()
		return err
	}
	op := &batched{ctx: ctx, cmds: cmds, done: make(chan struct{})}
	b.queue = append(b.queue, op)
	b.mu.Unlock()
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send sends cmds on the dedicated connection c in one round trip.
func send(ctx context.Context, c *redis.Conn, cmds []redis.Cmder) error {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = p.Process(ctx, cmd)
		}
		return nil
	})
	return err
}

// send sends cmds in one round trip of the client: a pipeline, even of one
// command. go-redis keeps pipelines on connections of their own, apart
// from single commands, so a Locker whose every call goes as a pipeline
// keeps to one connection while its calls come one at a time: a lone
// caller whose acquires went on one connection and releases on another,
// alternating between them, measured slower per cycle than one keeping to
// one. The batcher keeps its pipelines for reuse (an Exec leaves one
// empty), which spares allocating one per round trip.
func (b *batcher) send(ctx context.Context, cmds []redis.Cmder) error {
	p, _ := b.pipes.Get().(redis.Pipeliner)
	if p == nil {
		p = b.client.Pipeline()
	}
	_ = p.BatchProcess(ctx, cmds...)
	_, err := p.Exec(ctx)
	b.pipes.Put(p)
	return err
}

// next ends a round trip in flight. The queued calls, if any, go next, in
// a goroutine that keeps the round trip's place until the queue is empty.
func (b *batcher) next() {
	if q := b.take(); len(q) > 0 {
		go b.drain(q)
	}
}

// drain sends the queued calls q, then those queued meanwhile, until none
// are left.
func (b *batcher) drain(q []*batched) {
	for ; len(q) > 0; q = b.take() {
		b.flush(q)
	}
}

// take empties the queue, for the round trip that just came back to send
// next; when it is empty, that round trip's place is given up.
func (b *batcher) take() []*batched {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	if len(q) == 0 {
		b.sending--
	}
	return q
}

// flush sends the queued calls q in one pipeline. It runs under a ctx
// that ends at the latest of their deadlines, if all have one (a call
// whose ctx ends earlier has returned already), and a call whose ctx has
// ended is not sent.
func (b *batcher) flush(q []*batched) {
	var (
		live     []*batched
		cmds     []redis.Cmder
		deadline time.Time
		unbound  bool
	)
	for _, op := range q {
		if err := op.ctx.Err(); err != nil {
			op.err = err
			close(op.done)
			continue
		}
		live = append(live, op)
		cmds = append(cmds, op.cmds...)
		if d, ok := op.ctx.Deadline(); !ok {
			unbound = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if !unbound {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	_ = b.send(ctx, cmds)
	for _, op := range live {
		for _, c := range op.cmds {
			if err := c.Err(); err != nil {
				op.err = err
				break
			}
		}
		close(op.done)
	}
}

// exec sends cmds in one round trip: on conn, or through the batcher when
// conn is nil (see [batcher.do] for when the commands may be read).
func (l *Locker) exec(ctx context.Context, conn *redis.Conn, cmds ...redis.Cmder) error {
	if conn != nil {
		return send(ctx, conn, cmds)
	}
	return l.batch.do(ctx, cmds...)
}

// runScript runs a script with args, the arguments of its EVALSHA (from
// [evalScript.args]), on conn or through the batcher when conn is nil (as
// exec does); then, when the server does not have the script, its EVAL,
// sent the same way.
func (l *Locker) runScript(ctx context.Context, conn *redis.Conn, script *evalScript, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	err := l.exec(ctx, conn, cmd)
	switch {
	case err == nil || err == redis.Nil:
		return cmd
	case redis.HasErrorPrefix(err, "NOSCRIPT"):
		eval := slices.Clone(args)
		eval[0], eval[1] = "eval", script.src
		cmd = redis.NewCmd(ctx, eval...)
		if err = l.exec(ctx, conn, cmd); err == nil || err == redis.Nil {
			return cmd
		}
	}
	failed := redis.NewCmd(ctx)
	failed.SetErr(err)
	return failed
}
