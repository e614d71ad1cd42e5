package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// Clock is the wall clock of the servers started with it
// ([NewRedisWithClock], [NewPostgresWithClock], [ReplicaClock]): real time
// plus an offset that the test can change while they run, as a clock step
// or a replica whose clock is behind would. The servers run under an
// LD_PRELOAD shim that adds the offset to CLOCK_REALTIME (clock_gettime's
// CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday, time), which is
// what Redis's TIME and key expiry and PostgreSQL's clock_timestamp() read;
// CLOCK_MONOTONIC is left alone. The shim is built from C source with cc,
// once per test binary: without a C compiler the test fails, naming the
// packages to install.
type Clock struct {
	path   string
	offset *int64 // in the file the servers map
}

// NewClock returns a clock with offset 0, for servers started after it.
func NewClock(t testing.TB) *Clock {
	t.Helper()
	if _, err := clockShim(); err != nil {
		t.Fatal(err)
	}
	dir, err := tempDir("idemkit-clock-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "offset")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(8); err != nil {
		t.Fatal(err)
	}
	// Mapped for the life of the process: a server may outlive the test.
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("testenv: map the clock's offset file: %v", err)
	}
	return &Clock{path: path, offset: (*int64)(unsafe.Pointer(&mem[0]))}
}

// Set makes the servers' wall clock real time plus d (d < 0: behind) from
// now on, in every running process of those servers.
func (c *Clock) Set(d time.Duration) { atomic.StoreInt64(c.offset, int64(d)) }

// Step moves the servers' wall clock by d from now on (d < 0: back), in
// one atomic change of the offset.
func (c *Clock) Step(d time.Duration) { atomic.AddInt64(c.offset, int64(d)) }

// Offset returns the offset Set and Step left.
func (c *Clock) Offset() time.Duration { return time.Duration(atomic.LoadInt64(c.offset)) }

// env is the environment that puts a server under the clock.
func (c *Clock) env() []string {
	so, _ := clockShim()
	return []string{"LD_PRELOAD=" + so, clockFileEnv + "=" + c.path}
}

// checkShim fails unless the shim is mapped in the process pid: the
// dynamic loader only warns when it cannot preload a library.
func checkShim(pid int) error {
	so, err := clockShim()
	if err != nil {
		return err
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return fmt.Errorf("testenv: check the clock shim in process %d: %w", pid, err)
	}
	if !strings.Contains(string(maps), so) {
		return fmt.Errorf("testenv: the clock shim %s is not loaded in process %d (a statically linked server?)", so, pid)
	}
	return nil
}

const clockFileEnv = "IDEMKIT_CLOCK_OFFSET_FILE"

var clockShim = sync.OnceValues(func() (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		cc, err = exec.LookPath("gcc")
	}
	if err != nil {
		return "", errors.New("testenv: a server with a shifted clock needs a C compiler (cc) to build its LD_PRELOAD shim: " +
			"install Debian's gcc and libc6-dev packages (scripts/deps.sh does)")
	}
	dir, err := tempDir("idemkit-clockshim-")
	if err != nil {
		return "", err
	}
	src, so := filepath.Join(dir, "clockshift.c"), filepath.Join(dir, "clockshift.so")
	if err := os.WriteFile(src, []byte(shimSource), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", so, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("testenv: build the clock shim with %s: %v\n%s\n(missing headers: install Debian's libc6-dev package)", cc, err, out)
	}
	// Servers running as another user (PostgreSQL under root) load it too.
	return so, os.Chmod(so, 0o755)
})

// shimSource is the LD_PRELOAD shim. The offset (int64 nanoseconds) is
// read from a shared mapping of the clock's file at every call, so a new
// offset applies at once; a process that cannot map the file aborts
// rather than run on the real clock.
const shimSource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

static const int64_t *offset;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

__attribute__((constructor)) static void shim_init(void) {
	const char *path = getenv("` + clockFileEnv + `");
	if (path == NULL) {
		return;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *p = fd < 0 ? MAP_FAILED : mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "clockshift: cannot map %s\n", path);
		abort();
	}
	close(fd);
	offset = p;
}

static int64_t shift(void) {
	return offset == NULL ? 0 : __atomic_load_n(offset, __ATOMIC_RELAXED);
}

static void add(int64_t *sec, int64_t *frac, int64_t unit, int64_t ns) {
	int64_t t = *sec * 1000000000 + *frac * (1000000000 / unit) + ns;
	*sec = t / 1000000000;
	*frac = (t % 1000000000) / (1000000000 / unit);
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	if (real_clock_gettime == NULL) {
		real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
	}
	int r = real_clock_gettime(clk, ts);
	if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
		int64_t s = ts->tv_sec, f = ts->tv_nsec;
		add(&s, &f, 1000000000, shift());
		ts->tv_sec = s;
		ts->tv_nsec = f;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	if (real_gettimeofday == NULL) {
		real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
	}
	int r = real_gettimeofday(tv, tz);
	if (r == 0 && tv != NULL) {
		int64_t s = tv->tv_sec, f = tv->tv_usec;
		add(&s, &f, 1000000, shift());
		tv->tv_sec = s;
		tv->tv_usec = f;
	}
	return r;
}

time_t time(time_t *out) {
	struct timespec ts;
	time_t t = clock_gettime(CLOCK_REALTIME, &ts) == 0 ? ts.tv_sec : (time_t)-1;
	if (out != NULL) {
		*out = t;
	}
	return t;
}
`
