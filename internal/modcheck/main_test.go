package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goodTree is a synthetic repository of four modules: the root (with an
// internal package), a library sub-module whose test imports the root's
// internal package (and a directory with tests only), a command module, and an examples module that is
// never released (it imports internal code and does not even compile, so
// the check passes only if it leaves examples/ out).
func goodTree() map[string]string {
	return map[string]string{
		"go.mod":                "module example.test/kit\n\ngo 1.22\n",
		"kit.go":                "// Package kit is a test root.\npackage kit\n\n// Hello says hello.\nfunc Hello() string { return \"hello\" }\n",
		"internal/secret/s.go":  "package secret\n\nconst S = 1\n",
		"sub/go.mod":            "module example.test/kit/sub\n\ngo 1.22\n\nrequire example.test/kit v0.1.0\n\nreplace example.test/kit => ../\n",
		"sub/sub.go":            "package sub\n\nimport \"example.test/kit\"\n\n// Greet greets.\nfunc Greet() string { return kit.Hello() }\n",
		"sub/only/only_test.go": "package only\n",
		"sub/sub_test.go":       "package sub\n\nimport (\n\t\"testing\"\n\n\t\"example.test/kit/internal/secret\"\n)\n\nfunc TestS(t *testing.T) { _ = secret.S }\n",
		"cmd/kit/go.mod":        "module example.test/kit/cmd/kit\n\ngo 1.22\n\nrequire (\n\texample.test/kit v0.1.0\n\texample.test/kit/sub v0.1.0\n)\n\nreplace (\n\texample.test/kit => ../..\n\texample.test/kit/sub => ../../sub\n)\n",
		"cmd/kit/main.go":       "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.test/kit/sub\"\n)\n\nfunc main() { fmt.Println(sub.Greet()) }\n",
		"examples/go.mod":       "module example.test/kit/examples\n\ngo 1.22\n\nrequire example.test/kit v0.1.0\n\nreplace example.test/kit => ../\n",
		"examples/demo/main.go": "package main\n\nimport _ \"example.test/kit/internal/secret\"\n\nfunc main() { undefined() }\n",
	}
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// check runs the checker on a tree with no network: modules outside the
// tree are unreachable (GOPROXY ends in off).
func check(t *testing.T, files map[string]string, version string) (string, error) {
	t.Helper()
	var log bytes.Buffer
	err := run(context.Background(), config{Root: writeTree(t, files), Version: version, Upstream: "off", Log: &log})
	return log.String(), err
}

// mustFail asserts that err is a Problems whose text holds every want.
func mustFail(t *testing.T, err error, want ...string) {
	t.Helper()
	var probs Problems
	if !errors.As(err, &probs) {
		t.Fatalf("got error %v (%T), want Problems", err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("problems do not mention %q:\n%s", w, err)
		}
	}
}

func TestGoodTreeBuildsForAnOutsideModuleWithoutReplace(t *testing.T) {
	t.Parallel()
	log, err := check(t, goodTree(), "")
	if err != nil {
		t.Fatalf("good tree failed: %v\n%s", err, log)
	}
	for _, want := range []string{
		"4 modules, 3 released, version v0.1.0",
		"builds 2 packages and 1 command(s) of 3 released modules at v0.1.0",
		"note: `go install example.test/kit/cmd/kit@v0.1.0` refuses cmd/kit",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log does not say %q:\n%s", want, log)
		}
	}
}

func TestRequireAtV0IsRefusedWithTheGoModNamed(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/go.mod"] = strings.Replace(files["sub/go.mod"], "v0.1.0", "v0.0.0", 1)

	// The version the go.mod files require: they disagree.
	_, err := check(t, files, "")
	mustFail(t, err,
		"do not agree on one release version",
		"sub/go.mod requires example.test/kit v0.0.0 (v0.0.0 is no release: a module outside the repository cannot get it)",
		"cmd/kit/go.mod requires example.test/kit v0.1.0",
	)

	// A version given: the go.mod and its line are named.
	_, err = check(t, files, "v0.1.0")
	mustFail(t, err, "sub/go.mod:5: requires example.test/kit v0.0.0, not the release version v0.1.0 (v0.0.0 is no release")
}

func TestEveryRequireAtV0IsRefused(t *testing.T) {
	t.Parallel()
	files := goodTree()
	for _, name := range []string{"sub/go.mod", "cmd/kit/go.mod", "examples/go.mod"} {
		files[name] = strings.ReplaceAll(files[name], "v0.1.0", "v0.0.0")
	}
	_, err := check(t, files, "")
	mustFail(t, err, "require the repository's modules at v0.0.0, which is no release", "examples/go.mod requires example.test/kit v0.0.0")
}

func TestRequireAtAnotherVersionIsRefused(t *testing.T) {
	t.Parallel()
	_, err := check(t, goodTree(), "v0.2.0")
	mustFail(t, err,
		"sub/go.mod:5: requires example.test/kit v0.1.0, not the release version v0.2.0",
		"cmd/kit/go.mod:6: requires example.test/kit v0.1.0, not the release version v0.2.0",
		"cmd/kit/go.mod:7: requires example.test/kit/sub v0.1.0, not the release version v0.2.0",
		"examples/go.mod:5:",
	)
}

func TestReleasedModuleRequiringAnUnreleasedOneIsRefused(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/go.mod"] = "module example.test/kit/sub\n\ngo 1.22\n\nrequire (\n\texample.test/kit v0.1.0\n\texample.test/kit/examples v0.1.0\n)\n"
	_, err := check(t, files, "")
	mustFail(t, err, "sub/go.mod:7: released module example.test/kit/sub requires example.test/kit/examples, which is never released")
}

func TestReleasedCodeImportingRootInternalIsRefused(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/leak.go"] = "package sub\n\nimport \"example.test/kit/internal/secret\"\n\nvar _ = secret.S\n"
	_, err := check(t, files, "")
	mustFail(t, err, "sub/leak.go:3: released module example.test/kit/sub imports example.test/kit/internal/secret")
	if strings.Contains(err.Error(), "sub_test.go") {
		t.Errorf("a test file's import of internal code is reported:\n%s", err)
	}
}

func TestReleasedCodeThatDoesNotBuildIsReported(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/sub.go"] = "package sub\n\nimport \"example.test/kit\"\n\n// Greet greets.\nfunc Greet() string { return kit.Goodbye() }\n"
	_, err := check(t, files, "")
	mustFail(t, err, "consumer module", "no replace", "failed", "undefined: kit.Goodbye")
}

func TestMalformedVersionIsRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0.1.0", "v0.1", "v0.1.0+meta", "v2.0.0"} {
		_, err := check(t, goodTree(), v)
		mustFail(t, err, v)
	}
}
