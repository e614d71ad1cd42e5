package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const firestoreMissing = "the Firestore emulator was not found: install Java 17 and Debian's google-cloud-cli-firestore-emulator package " +
	"(from Google's Cloud SDK apt repository), or set FIRESTORE_EMULATOR_HOST to use a running emulator"

// FirestoreEmulator is Google's Firestore emulator. Host is what
// FIRESTORE_EMULATOR_HOST holds for it.
type FirestoreEmulator struct {
	Host string // host:port

	proc *process
}

var sharedFirestore shared[*FirestoreEmulator]

// Firestore returns the package's shared Firestore emulator, started on
// first use on a free loopback port (the emulator jar run by java
// directly, so stopping it stops the JVM) and warmed up with a first
// request. It sets FIRESTORE_EMULATOR_HOST for the process, so
// firestore.NewClient connects to it. With FIRESTORE_EMULATOR_HOST already
// set, that emulator is used. Use [FirestoreProject] to keep tests apart:
// the emulator keeps every project's data separately.
func Firestore(t testing.TB) *FirestoreEmulator {
	t.Helper()
	return sharedFirestore.get(t, func() (*FirestoreEmulator, error) {
		if host := os.Getenv("FIRESTORE_EMULATOR_HOST"); host != "" {
			return &FirestoreEmulator{Host: host}, nil
		}
		e, err := startFirestore()
		if err != nil {
			return nil, err
		}
		if err := os.Setenv("FIRESTORE_EMULATOR_HOST", e.Host); err != nil {
			return nil, err
		}
		return e, nil
	})
}

// NewFirestore starts an emulator of the test's own, for tests that stall
// or stop it; it is stopped when the test ends. Unlike [Firestore] it does
// not set FIRESTORE_EMULATOR_HOST: point a client at Host yourself (for
// example with option.WithEndpoint and insecure credentials, or by setting
// the variable only around firestore.NewClient).
func NewFirestore(t testing.TB) *FirestoreEmulator {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal(firestoreMissing)
	}
	e, err := startFirestore()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.proc.stop(syscall.SIGKILL) })
	return e
}

// Stall freezes the emulator (SIGSTOP): connections stay open, nothing is
// answered. Use it on an emulator of the test's own ([NewFirestore]). The
// returned function resumes it; the test's cleanup does too.
func (e *FirestoreEmulator) Stall(t testing.TB) (resume func()) {
	t.Helper()
	if e.proc == nil {
		t.Fatal("testenv: Stall needs an emulator started by testenv")
	}
	return e.proc.stall(t)
}

// FirestoreProject returns a project id unique to the test: the emulator
// keeps each project's documents apart, so tests sharing one emulator never
// see each other's data.
func FirestoreProject(t testing.TB) string {
	return strings.ReplaceAll(Name(t), "_", "-")
}

// Clear deletes every document of project (the emulator's reset endpoint).
func (e *FirestoreEmulator) Clear(t testing.TB, project string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, "http://"+e.Host+"/emulator/v1/projects/"+project+"/databases/(default)/documents", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: clear the emulator: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: clear the emulator: status %d", resp.StatusCode)
	}
}

var firestoreJarOnce = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("IDEMKIT_FIRESTORE_EMULATOR_JAR"); p != "" {
		return p, nil
	}
	roots := []string{"/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/google-cloud-sdk", "/opt/google-cloud-sdk"}
	if gcloud, err := exec.LookPath("gcloud"); err == nil {
		if out, err := exec.Command(gcloud, "info", "--format=value(installation.sdk_root)").Output(); err == nil {
			roots = append([]string{strings.TrimSpace(string(out))}, roots...)
		}
	}
	for _, r := range roots {
		jar := filepath.Join(r, "platform", "cloud-firestore-emulator", "cloud-firestore-emulator.jar")
		if _, err := os.Stat(jar); err == nil {
			return jar, nil
		}
	}
	return "", errors.New(firestoreMissing)
})

func startFirestore() (*FirestoreEmulator, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, errors.New(firestoreMissing)
	}
	jar, err := firestoreJarOnce()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("idemkit-firestore-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args := []string{"-cp", jar, "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
			"start", "--host=127.0.0.1", "--port=" + strconv.Itoa(port)}
		p, err := start("firestore-emulator", java, args, filepath.Join(dir, "emulator.log"), nil, nil)
		if err != nil {
			return nil, err
		}
		if lastErr = waitFor(p, "firestore emulator", func() error { return httpOK("http://"+host+"/", 2*time.Second) }); lastErr != nil {
			p.stop(syscall.SIGKILL)
			continue
		}
		// The first real request after a cold start can take many seconds.
		warm := "http://" + host + "/v1/projects/idemkit-warmup/databases/(default)/documents/warmup/doc"
		if err := waitFor(p, "firestore emulator warm-up", func() error { return httpAnswers(warm, 60*time.Second) }); err != nil {
			p.stop(syscall.SIGKILL)
			return nil, err
		}
		return &FirestoreEmulator{Host: host, proc: p}, nil
	}
	return nil, lastErr
}

func httpOK(url string, timeout time.Duration) error {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// httpAnswers succeeds on any HTTP answer (a 404 for a missing document is
// an answer).
func httpAnswers(url string, timeout time.Duration) error {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
