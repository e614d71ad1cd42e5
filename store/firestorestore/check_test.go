package firestorestore_test

import (
	"net"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
)

// TestGuardCheck: the startup check passes on the emulator and fails
// with a transient code when nothing listens where the client dials.
func TestGuardCheck(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	if err := newGuard(t, client(t, project), middleware.WithOpTimeout(30*time.Second)).Check(t.Context()); err != nil {
		t.Fatalf("Check on the emulator: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	err = newGuard(t, dial(t, closed, project), middleware.WithOpTimeout(time.Second)).Check(t.Context())
	if !idemkit.CodeOf(err).Transient() {
		t.Fatalf("Check with nothing listening: %v; want a transient code", err)
	}
	t.Logf("nothing listening: %v", err)
}
