package firestorestore_test

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/firestorestore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// emulatorCreds is the emulator's owner credential.
type emulatorCreds struct{}

func (emulatorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}

func (emulatorCreds) RequireTransportSecurity() bool { return false }

// dial returns a real client of the emulator at host for project, on a
// gRPC connection of its own dialled with opts after the emulator's
// plaintext transport and credentials. It is closed when the test ends.
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
	c, err := firestore.NewClient(context.Background(), project, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// client returns a client of the package's shared emulator for project.
func client(t testing.TB, project string, opts ...grpc.DialOption) *firestore.Client {
	t.Helper()
	return dial(t, testenv.Firestore(t).Host, project, opts...)
}

// interceptor stands between a client and the emulator for one RPC: it is
// given the RPC's full method name and, for unary calls, its request (nil
// for streams); call sends the RPC on, and what it returns is what the
// client sees.
type interceptor func(method string, req any, call func() error) error

// intercept returns the dial options that pass every RPC of a connection,
// unary and streaming (BatchGetDocuments and RunQuery are streams), through
// f.
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

// rpcCounter counts the RPCs a client sends, by method name.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounter) add(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[method[strings.LastIndexByte(method, '/')+1:]]++
}

// total returns how many RPCs were sent so far.
func (c *rpcCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.n {
		n += k
	}
	return n
}

// take returns the counts since the last call and resets them.
func (c *rpcCounter) take() (total int, by string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.n))
	for m, k := range c.n {
		total += k
		names = append(names, m+"="+strconv.Itoa(k))
	}
	sort.Strings(names)
	c.n = map[string]int{}
	return total, strings.Join(names, " ")
}

// countingClient is a real client of the shared emulator whose connection
// counts every RPC it sends.
func countingClient(t testing.TB, project string) (*firestore.Client, *rpcCounter) {
	t.Helper()
	rc := &rpcCounter{}
	c := client(t, project, intercept(func(method string, _ any, call func() error) error {
		rc.add(method)
		return call()
	})...)
	return c, rc
}

// newStore returns a store on c with opts.
func newStore(t testing.TB, c *firestore.Client, opts ...firestorestore.Option) *firestorestore.Store {
	t.Helper()
	s, err := firestorestore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// docs returns the documents of a collection.
func docs(t testing.TB, c *firestore.Client, collection string) []*firestore.DocumentSnapshot {
	t.Helper()
	snaps, err := c.Collection(collection).Documents(context.Background()).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	return snaps
}

// unexpiring returns the ids of the documents of a collection without an
// expireAt timestamp: there must be none.
func unexpiring(ctx context.Context, c *firestore.Client, collection string) ([]string, error) {
	snaps, err := c.Collection(collection).Documents(ctx).GetAll()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range snaps {
		if _, ok := s.Data()[firestorestore.FieldExpireAt].(time.Time); !ok {
			ids = append(ids, s.Ref.ID)
		}
	}
	return ids, nil
}
