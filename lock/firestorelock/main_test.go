package firestorelock_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// margin is how far the real-clock tests stay from an expiry: comfortably
// more than a round trip to the local emulator on a busy machine. The
// emulator runs on this machine, so its clock is the test's.
const margin = 250 * time.Millisecond

// project starts (or reuses) the package's shared emulator and returns a
// project id of the test's own: the test sees an empty database.
func project(t testing.TB) string {
	t.Helper()
	testenv.Firestore(t)
	return testenv.FirestoreProject(t)
}

// commitMethod is the full gRPC method name of Firestore's Commit.
const commitMethod = "/google.firestore.v1.Firestore/Commit"

// interceptor stands between a client and the emulator for one RPC: it is
// given the RPC's full method name and, for unary calls, its request (nil
// for streams); call sends the RPC on, and what the interceptor returns is
// what the client sees.
type interceptor func(method string, req any, call func() error) error

// intercept returns the dial options that pass every RPC of a connection,
// unary and streaming, through f.
func intercept(f interceptor) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return f(method, req, func() error { return invoker(ctx, method, req, reply, cc, opts...) })
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			var cs grpc.ClientStream
			err := f(method, nil, func() (err error) {
				cs, err = streamer(ctx, desc, cc, method, opts...)
				return err
			})
			if err != nil {
				return nil, err
			}
			return cs, nil
		}),
	}
}

// emulatorCreds is the emulator's owner credential, which the Firestore
// client also sends to an emulator.
type emulatorCreds struct{}

func (emulatorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}

func (emulatorCreds) RequireTransportSecurity() bool { return false }

// dial returns a real client of the emulator at host for project, on a
// gRPC connection of its own dialled with opts after the emulator's
// plaintext transport and credentials. It never relies on
// FIRESTORE_EMULATOR_HOST. The client is closed when the test ends.
func dial(t testing.TB, host, project string, opts ...grpc.DialOption) *firestore.Client {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(emulatorCreds{}),
	}, opts...)
	conn, err := grpc.NewClient(host, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c, err := firestore.NewClient(context.Background(), project, option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// client returns a client of the shared emulator for project, on a
// connection of its own.
func client(t testing.TB, project string, opts ...grpc.DialOption) *firestore.Client {
	t.Helper()
	return dial(t, testenv.Firestore(t).Host, project, opts...)
}

// newLocker builds a locker on a client of its own in project, warmed up.
func newLocker(t testing.TB, project string, opts ...firestorelock.Option) *firestorelock.Locker {
	t.Helper()
	l, err := firestorelock.New(client(t, project), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	warm(t, l)
	return l
}

// warm sends a locker's first read and first query: on a fresh project
// the emulator takes hundreds of milliseconds over each, which would eat
// the real-clock tests' margins.
func warm(t testing.TB, l *firestorelock.Locker) {
	t.Helper()
	if _, err := l.IsLocked(t.Context(), "warm-up"); err != nil {
		t.Fatalf("warm-up read: %v", err)
	}
	if _, _, err := l.LookupID(t.Context(), lock.NewID()); err != nil {
		t.Fatalf("warm-up query: %v", err)
	}
}

// probes reads and writes a locker's documents behind its back, through a
// client of their own (a locktest Env's Break closes the locker's).
type probes struct {
	client *firestore.Client
	locks  *firestore.CollectionRef
}

func newProbes(t testing.TB, project string, l *firestorelock.Locker) probes {
	c := client(t, project)
	return probes{client: c, locks: c.Collection(firestorelock.Collection(l))}
}

// doc returns the document of key (normalised as the locker does).
func (p probes) doc(key string) (*firestore.DocumentRef, string, error) {
	n, err := lock.NormalizeKey(key)
	if err != nil {
		return nil, "", err
	}
	return p.locks.Doc(firestorelock.DocID(n)), n, nil
}

// read returns key's document, or nil when it does not exist.
func (p probes) read(ctx context.Context, key string) (*firestore.DocumentSnapshot, error) {
	ref, _, err := p.doc(key)
	if err != nil {
		return nil, err
	}
	snaps, err := p.client.GetAll(ctx, []*firestore.DocumentRef{ref})
	if err != nil || !snaps[0].Exists() {
		return nil, err
	}
	return snaps[0], nil
}

// raiseFence stores a tombstone with fence f for key, as a release would
// leave it.
func (p probes) raiseFence(ctx context.Context, key string, f idemkit.Fence) error {
	ref, n, err := p.doc(key)
	if err != nil {
		return err
	}
	_, err = ref.Set(ctx, firestorelock.TombstoneData(n, f))
	return err
}

// fence reads the fence that key's document carries: its fence field, or
// for a lease created on a free key its create time in milliseconds; 0
// when there is no document.
func (p probes) fence(ctx context.Context, key string) (idemkit.Fence, error) {
	snap, err := p.read(ctx, key)
	if err != nil || snap == nil {
		return 0, err
	}
	v, ok := snap.Data()[firestorelock.FieldFence]
	if !ok {
		return idemkit.Fence(snap.CreateTime.UnixMilli()), nil
	}
	f, ok := v.(int64)
	if !ok || f < 1 {
		return 0, idemkit.NewError(idemkit.CodeInternal, "probe", "malformed fence", nil)
	}
	return idemkit.Fence(f), nil
}

// stored reports whether key's document holds a lease, live or expired (a
// tombstone holds none).
func (p probes) stored(ctx context.Context, key string) (bool, error) {
	snap, err := p.read(ctx, key)
	if err != nil || snap == nil {
		return false, err
	}
	_, lease := snap.Data()[firestorelock.FieldLockID]
	return lease, nil
}

// immortal lists every document of the project, in any collection, that
// has no expireAt timestamp.
func (p probes) immortal(ctx context.Context) ([]string, error) {
	var paths []string
	cols := p.client.Collections(ctx)
	for {
		col, err := cols.Next()
		if err == iterator.Done {
			return paths, nil
		}
		if err != nil {
			return nil, err
		}
		snaps, err := col.Documents(ctx).GetAll()
		if err != nil {
			return nil, err
		}
		for _, s := range snaps {
			if _, ok := s.Data()[firestorelock.FieldExpireAt].(time.Time); !ok {
				paths = append(paths, col.ID+"/"+s.Ref.ID)
			}
		}
	}
}

// count returns how many documents a collection holds.
func count(t testing.TB, c *firestore.CollectionRef) int {
	t.Helper()
	snaps, err := c.Select().Documents(t.Context()).GetAll()
	if err != nil {
		t.Fatalf("list %s: %v", c.ID, err)
	}
	return len(snaps)
}

// acquireOK takes the lock on key through l and fails the test unless it
// gets it.
func acquireOK(t testing.TB, l lock.Locker, key string, ttl time.Duration) lock.Lease {
	t.Helper()
	lease, ok, err := l.Acquire(t.Context(), key, ttl)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want a lease", ok, err)
	}
	return lease
}

// outlive waits until the server clock (the machine's: the emulator runs
// here) is past until by the margin.
func outlive(until time.Time) { time.Sleep(time.Until(until.Add(margin))) }
