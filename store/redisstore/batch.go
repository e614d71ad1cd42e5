package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxInflight is how many round trips of a store's calls may be in flight
// before further calls wait to share the next one.
const maxInflight = 4

// batcher sends the commands of a store's concurrent calls together. A
// call sends its commands at once, in a round trip of their own, while
// fewer than limit such round trips are in flight; beyond that it queues
// them, and the next round trip that comes back takes the whole queue with
// it in one pipeline. So a lone call costs what it would cost alone, and
// under load the server reads, runs and answers many calls' commands per
// round trip (Redis spends most of a small command's time in reading and
// writing sockets).
type batcher struct {
	client redis.UniversalClient
	limit  int

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
// among their results, as a pipeline's Exec does. When ctx ends while they
// are queued, do returns its error at once, and they may still be sent
// (as a reply lost on the way back would be).
func (b *batcher) do(ctx context.Context, cmds ...redis.Cmder) error {
	b.mu.Lock()
	if b.sending < b.limit {
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

// send sends cmds in one round trip of the client: a pipeline, even of one
// command. go-redis keeps pipelines on connections of their own, apart
// from single commands, so a store whose every call goes as a pipeline
// keeps to one connection while its calls come one at a time (a lone
// caller alternating between two connections measured slower). Pipelines
// are kept for reuse (an Exec leaves one empty).
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

// flush sends the queued calls q in one pipeline, under a ctx that ends at
// the latest of their deadlines if all have one (a call whose ctx ends
// earlier has returned already); a call whose ctx has ended is not sent.
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
