package firestorelock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// batchGetMethod is the full gRPC method name of Firestore's
// BatchGetDocuments, which document reads use.
const batchGetMethod = "/google.firestore.v1.Firestore/BatchGetDocuments"

// gatedReads counts a client's document reads and commits, and holds
// back the read whose number is hold until gate closes (or the read's
// ctx ends).
type gatedReads struct {
	reads, commits atomic.Int32
	hold, fail     int32 // the numbers of the read to hold back and of the read to fail
	gate           chan struct{}
}

func (g *gatedReads) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method != batchGetMethod {
				return streamer(ctx, desc, cc, method, opts...)
			}
			switch g.reads.Add(1) {
			case g.hold:
				select {
				case <-g.gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			case g.fail:
				return nil, status.Error(codes.PermissionDenied, "test: the read is refused")
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == commitMethod {
				g.commits.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
	}
}

type acquired struct {
	ok  bool
	err error
}

// acquireCrowd starts calls acquires of the key "k" on l, whose client
// counts its reads in reads and holds the first one back: the first
// acquire alone until its read was sent, then the others, and returns
// once they all wait for the next read. Their results come on the
// channel returned.
func acquireCrowd(t *testing.T, l *firestorelock.Locker, calls int, reads *atomic.Int32) <-chan acquired {
	t.Helper()
	ctx := t.Context()
	results := make(chan acquired, calls)
	acquire := func() {
		_, ok, err := l.Acquire(ctx, "k", time.Minute)
		results <- acquired{ok, err}
	}
	go acquire()
	await(t, "the first read", func() bool { return reads.Load() == 1 })
	for range calls - 1 {
		go acquire()
	}
	await(t, "the others join the next read", func() bool { return firestorelock.PendingAcquires(l, "k") == calls-1 })
	return results
}

// TestAcquireSharesWork: the acquires of one key that run at once in a
// process share one read of its document, and only one of them writes.
// With the first read held back, 31 more acquires of the free key cost one
// read between them and one commit: exactly one of the 32 gets the lease,
// the others answer "locked".
func TestAcquireSharesWork(t *testing.T) {
	t.Parallel()
	const calls = 32
	p := project(t)
	g := &gatedReads{hold: 1, gate: make(chan struct{})}
	l, err := firestorelock.New(client(t, p, g.dialOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	results := acquireCrowd(t, l, calls, &g.reads)
	close(g.gate)
	won := 0
	for range calls {
		r := receive(t, "an acquire", results)
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		if r.ok {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d acquires got the lease; want 1", won, calls)
	}
	if r, c := g.reads.Load(), g.commits.Load(); r != 2 || c != 1 {
		t.Fatalf("%d acquires sent %d reads and %d commits; want 2 and 1", calls, r, c)
	}
}

// answerHeld is a client stream whose first answer is handed to the
// caller only once gate closes; answered closes when that answer arrives.
type answerHeld struct {
	grpc.ClientStream
	once     sync.Once
	answered chan struct{}
	gate     chan struct{}
}

func (s *answerHeld) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		close(s.answered)
		<-s.gate
	})
	return err
}

// TestAcquireAfterAWinWritesNothing: a shared read that found the key
// free before the lease an acquire of this process won was committed, but
// whose answer comes after that acquire returned, writes nothing: the key
// was held within each call that joined it, and they all answer
// "locked". The first acquire's commit waits until the second read has
// been answered by the server, and the answer is handed over only once
// the first acquire has returned its lease.
func TestAcquireAfterAWinWritesNothing(t *testing.T) {
	t.Parallel()
	const calls = 32
	p := project(t)
	var reads, commits atomic.Int32
	first := make(chan struct{})
	second := &answerHeld{answered: make(chan struct{}), gate: make(chan struct{})}
	opts := []grpc.DialOption{
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method != batchGetMethod {
				return streamer(ctx, desc, cc, method, opts...)
			}
			switch reads.Add(1) {
			case 1:
				select {
				case <-first:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			case 2:
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				second.ClientStream = cs
				return second, nil
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == commitMethod && commits.Add(1) == 1 {
				select {
				case <-second.answered:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
	}
	l, err := firestorelock.New(client(t, p, opts...))
	if err != nil {
		t.Fatal(err)
	}
	results := acquireCrowd(t, l, calls, &reads)
	close(first)
	if r := receive(t, "the first acquire", results); r.err != nil || !r.ok {
		t.Fatalf("the first acquire: got the lease %v, error %v; want the lease", r.ok, r.err)
	}
	close(second.gate)
	for range calls - 1 {
		if r := receive(t, "an acquire", results); r.err != nil || r.ok {
			t.Fatalf("an acquire that joined the second read: got the lease %v, error %v; want \"locked\"", r.ok, r.err)
		}
	}
	if r, c := reads.Load(), commits.Load(); r != 2 || c != 1 {
		t.Fatalf("%d acquires sent %d reads and %d commits; want 2 and 1", calls, r, c)
	}
}

// TestAcquireSharedReadFails: an acquire whose shared read, sent by
// another acquire, failed reads again by itself: it never gets another
// call's failure. With the first read held back, two acquires join the
// next read, which fails; the one that sent it reports the failure, the
// other reads again and answers "locked".
func TestAcquireSharedReadFails(t *testing.T) {
	t.Parallel()
	p := project(t)
	g := &gatedReads{hold: 1, gate: make(chan struct{}), fail: 2}
	l, err := firestorelock.New(client(t, p, g.dialOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	holder := newLocker(t, p)
	acquireOK(t, holder, "k", time.Minute)
	ctx := t.Context()
	results := make(chan acquired, 3)
	acquire := func() {
		_, ok, err := l.Acquire(ctx, "k", time.Minute)
		results <- acquired{ok, err}
	}
	go acquire()
	await(t, "the first read", func() bool { return g.reads.Load() == 1 })
	go acquire()
	go acquire()
	await(t, "two acquires join the next read", func() bool { return firestorelock.PendingAcquires(l, "k") == 2 })
	close(g.gate)
	failed := 0
	for range 3 {
		r := receive(t, "an acquire", results)
		switch {
		case r.err != nil && idemkit.CodeOf(r.err) == idemkit.CodeAuthFailed:
			failed++
		case r.err != nil || r.ok:
			t.Fatalf("Acquire = %v, %v; want locked, or the failed read's AuthFailed", r.ok, r.err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d acquires reported the failed read; want only the one that sent it", failed)
	}
	if n := g.reads.Load(); n != 3 {
		t.Fatalf("%d reads; want 3 (the first, the failed shared one, and the other member's own)", n)
	}
}

// TestReleaseWakesLocalWatches: a release through the locker wakes the
// key's watches in the process as soon as it returns, without waiting for
// the listener. Listen streams are refused here (the client keeps
// retrying them), so only the release itself can wake the watch.
func TestReleaseWakesLocalWatches(t *testing.T) {
	t.Parallel()
	p := project(t)
	s := newListens()
	s.refuse.Store(uint32(codes.Unavailable))
	l := watchedLocker(t, p, s)
	ctx := t.Context()
	for _, byKey := range []bool{true, false} {
		lease := acquireOK(t, l, "k", time.Minute)
		ch, stop := l.Watch(ctx, "k")
		select {
		case <-ch:
			t.Fatal("the watch of a held key fired before the release")
		default:
		}
		var err error
		if byKey {
			_, err = l.ReleaseKey(ctx, lease.Key, lease.ID)
		} else {
			_, err = l.Release(ctx, lease.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		default:
			t.Fatalf("the watch had not fired when the release (by key: %v) returned", byKey)
		}
		if n := s.opened.Load(); n != 0 {
			t.Fatalf("%d Listen streams opened while they were refused", n)
		}
		stop()
	}
}
