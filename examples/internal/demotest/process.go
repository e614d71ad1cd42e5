package demotest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childEnv carries a child process's arguments (JSON) and program name:
// a test binary started with it runs that program instead of its tests.
const (
	childArgsEnv    = "IDEMKIT_DEMO_CHILD_ARGS"
	childProgramEnv = "IDEMKIT_DEMO_CHILD_PROGRAM"
)

// Child runs, when the test binary was started by [StartProcess], the
// program named there instead of the tests, and exits; otherwise it
// returns at once. Call it first in TestMain, with the programs the tests
// start by name.
func Child(programs map[string]RunFunc) {
	raw, ok := os.LookupEnv(childArgsEnv)
	if !ok {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "demotest child: bad arguments:", err)
		os.Exit(2)
	}
	run, ok := programs[os.Getenv(childProgramEnv)]
	if !ok {
		fmt.Fprintln(os.Stderr, "demotest child: no program", os.Getenv(childProgramEnv))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ready := make(chan string, 1)
	go func() {
		// The parent reads the address from this line.
		fmt.Fprintln(os.Stderr, "demotest child listening on", <-ready)
	}()
	if err := run(ctx, args, logger, ready); err != nil {
		fmt.Fprintln(os.Stderr, "demotest child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Process is a demo program running in a child process of the test (the
// test binary itself, see [Child]): a node that can be killed as a crash
// would kill it.
type Process struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	mu   sync.Mutex
	logs strings.Builder
}

var listening = regexp.MustCompile(`^demotest child listening on (\S+)$`)

// StartProcess starts the program named name (see [Child]) in a child
// process with args and -addr 127.0.0.1:0, its environment the test's plus
// env (KEY=value), and returns once it listens.
// The process is killed when the test ends, if it still runs; its log is
// in the test's output if the test fails.
func StartProcess(t *testing.T, name string, env []string, args ...string) *Process {
	t.Helper()
	raw, err := json.Marshal(append([]string{"-addr", "127.0.0.1:0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), childArgsEnv+"="+string(raw), childProgramEnv+"="+name)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("log of the child process %d:\n%s", cmd.Process.Pid, p.Log())
		}
	})
	select {
	case p.Addr = <-addr:
		return p
	case <-p.done:
		t.Fatalf("the child process exited before it listened:\n%s", p.Log())
	case <-time.After(time.Minute):
		t.Fatalf("the child process did not listen within a minute:\n%s", p.Log())
	}
	return nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill kills the process with SIGKILL, as a crash would end it, and waits
// until it has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has exited, waiting up to d for it.
func (p *Process) Exited(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Log returns what the process wrote to its stderr so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}
