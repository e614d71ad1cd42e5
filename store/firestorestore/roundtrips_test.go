package firestorestore_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/middleware"
)

// rpcCounter counts the RPCs a client sends, by method name.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounter) add(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[method[strings.LastIndexByte(method, '/')+1:]]++
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

// countingClient is a real client of the emulator whose connection counts
// every RPC it sends.
func countingClient(t *testing.T, project string) (*firestore.Client, *rpcCounter) {
	t.Helper()
	rc := &rpcCounter{n: map[string]int{}}
	c := firestoretest.Client(t, project, firestoretest.Intercept(func(method string, _ any, call func() error) error {
		rc.add(method)
		return call()
	})...)
	return c, rc
}

// TestGuardRoundTrips counts the RPCs the guard sends to Firestore: a
// replay is one read; a first execution is the read, the acquire (a read
// and a write-only commit), the double-check read, the fenced put (one
// read-write transaction) and the release (a read and a conditional
// delete through the key's document).
func TestGuardRoundTrips(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	c, rc := countingClient(t, p)
	l, err := firestorelock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(newStore(t, c), l)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fingerprint.Value("round trips")
	if err != nil {
		t.Fatal(err)
	}
	run := func() middleware.Outcome {
		out, err := g.Execute(t.Context(), "order-1", fp, func(context.Context) (middleware.Result, error) {
			return middleware.Result{Value: []byte("ok")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rc.take()
	if out := run(); out.Replayed {
		t.Fatal("the first execution was a replay")
	}
	first, firstBy := rc.take()
	if out := run(); !out.Replayed {
		t.Fatal("the retry was not a replay")
	}
	replay, replayBy := rc.take()
	t.Logf("first execution: %d RPCs (%s); replay: %d (%s)", first, firstBy, replay, replayBy)
	const wantFirst = "BatchGetDocuments=5 BeginTransaction=1 Commit=3"
	if first != 9 || firstBy != wantFirst {
		t.Errorf("first execution: %d RPCs (%s); want 9 (%s)", first, firstBy, wantFirst)
	}
	if replay != 1 || replayBy != "BatchGetDocuments=1" {
		t.Errorf("replay: %d RPCs (%s); want 1 (BatchGetDocuments=1)", replay, replayBy)
	}
}
