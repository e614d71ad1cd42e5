package testenv

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

const dynamoMissing = "dynalite (a DynamoDB server for tests) was not found on PATH: install Node.js and npm, then " +
	"npm install -g dynalite@4.0.0 (scripts/deps.sh does), or set IDEMKIT_DYNAMODB_URL to use a running DynamoDB endpoint"

// DynamoServer is a DynamoDB endpoint the tests can reach at URL: dynalite,
// an implementation of DynamoDB's API on LevelDB. Point a client at it with
// any static credentials and any region.
type DynamoServer struct {
	URL string // http://127.0.0.1:<port>

	mu   sync.Mutex
	dir  string // the data directory of a server from NewDynamo; "" for the shared one
	port int
	proc *process
}

var sharedDynamo shared[*DynamoServer]

// Dynamo returns the package's shared dynalite, started on first use on a
// free loopback port, in memory. Tests sharing it keep apart by table name
// ([Name]). With IDEMKIT_DYNAMODB_URL set, that endpoint is used instead.
func Dynamo(t testing.TB) *DynamoServer {
	t.Helper()
	return sharedDynamo.get(t, func() (*DynamoServer, error) {
		if url := os.Getenv("IDEMKIT_DYNAMODB_URL"); url != "" {
			return &DynamoServer{URL: url}, nil
		}
		return startDynamo("dynalite", false)
	})
}

// NewDynamo starts a dynalite for this test alone, stopped when the test
// ends, for fault tests that stall, kill and restart it. It keeps its
// tables in a LevelDB directory, so they survive [DynamoServer.Stop] and
// [DynamoServer.Start] (as a crashed DynamoDB node's data does).
func NewDynamo(t testing.TB) *DynamoServer {
	t.Helper()
	s, err := startDynamo("dynalite-"+Name(t), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

var dynaliteBinary = sync.OnceValues(func() (string, error) { return exec.LookPath("dynalite") })

func startDynamo(name string, durable bool) (*DynamoServer, error) {
	if _, err := dynaliteBinary(); err != nil {
		return nil, errors.New(dynamoMissing)
	}
	dir, err := tempDir("idemkit-dynamo-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &DynamoServer{URL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port}
		if durable {
			s.dir = dir
		}
		if lastErr = s.launch(name, dir); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// launch starts dynalite and waits until it answers HTTP.
func (s *DynamoServer) launch(name, logDir string) error {
	bin, err := dynaliteBinary()
	if err != nil {
		return errors.New(dynamoMissing)
	}
	// Tables are created ACTIVE at once: the 500 ms default only slows
	// tests down (CreateTable waits for ACTIVE either way).
	args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(s.port), "--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
	if s.dir != "" {
		args = append(args, "--path", filepath.Join(s.dir, "data"))
	}
	p, err := start(name, bin, args, filepath.Join(logDir, "dynalite.log"), nil, nil)
	if err != nil {
		return err
	}
	if err := waitFor(p, name, func() error { return httpAnswers(s.URL+"/", 2*time.Second) }); err != nil {
		p.stop(syscall.SIGKILL)
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

func (s *DynamoServer) kill() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.stop(syscall.SIGKILL)
	}
}

// Stop kills the server (SIGKILL): it is gone at once, as in a crash, and
// its connections break. Only for servers from NewDynamo.
func (s *DynamoServer) Stop(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("testenv: Stop works only on servers started by NewDynamo")
	}
	s.kill()
}

// Start starts a stopped server again on the same port and data
// directory, and returns when it answers.
func (s *DynamoServer) Start(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("testenv: Start works only on servers started by NewDynamo")
	}
	if err := s.launch("dynalite (restarted)", s.dir); err != nil {
		t.Fatal(err)
	}
}

// Restart kills the server and starts it again with the same data.
func (s *DynamoServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

// Stall freezes the server (SIGSTOP): connections stay open, nothing is
// answered. Use it on a server of the test's own ([NewDynamo]). The
// returned function resumes it; the test's cleanup does too.
func (s *DynamoServer) Stall(t testing.TB) (resume func()) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		t.Fatal("testenv: Stall needs a server started by testenv")
	}
	return p.stall(t)
}
