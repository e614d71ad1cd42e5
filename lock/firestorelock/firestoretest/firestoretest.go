package firestoretest

import (
	"context"
	"testing"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemkit/idemkit/internal/testenv"
)

// Main runs the package's tests and then stops the emulator they started.
// Call it from TestMain.
func Main(m *testing.M) { testenv.Main(m) }

// Project starts (or reuses) the package's emulator and returns a project
// id of the test's own: the test sees an empty database.
func Project(t testing.TB) string {
	t.Helper()
	testenv.Firestore(t)
	return testenv.FirestoreProject(t)
}

// CommitMethod is the full gRPC method name of Firestore's Commit, as an
// [Interceptor] sees it.
const CommitMethod = "/google.firestore.v1.Firestore/Commit"

// Interceptor stands between a client and the emulator for one RPC: it is
// given the RPC's full method name and, for unary calls, its request (nil
// for streams); call sends the RPC on, and what the interceptor returns is
// what the client sees. An interceptor that does not call call keeps the
// RPC from the server.
type Interceptor func(method string, req any, call func() error) error

// Intercept returns the dial options that pass every RPC of a connection,
// unary and streaming, through f. Give them to [Client].
func Intercept(f Interceptor) []grpc.DialOption {
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

// Client returns a real client of the package's emulator (started on first
// use) for project, on a gRPC connection of its own dialled with opts
// after the emulator's plaintext transport and credentials: pass
// [Intercept]'s options to see or change its RPCs. The client and its
// connection are closed when the test ends.
func Client(t testing.TB, project string, opts ...grpc.DialOption) *firestore.Client {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(emulatorCreds{}),
	}, opts...)
	conn, err := grpc.NewClient(testenv.Firestore(t).Host, opts...)
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
