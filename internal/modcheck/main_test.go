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
// internal package (and a directory with tests only), a command module, and
// an examples module that is never released (it imports internal code and
// does not even compile, so the check passes only if it leaves examples/
// out). No go.mod has a replace directive; go.work ties them together, and
// docs/modules.md has the table of module graphs.
func goodTree() map[string]string {
	return map[string]string{
		"go.mod":                "module example.test/kit\n\ngo 1.22\n",
		"kit.go":                "// Package kit is a test root.\npackage kit\n\n// Hello says hello.\nfunc Hello() string { return \"hello\" }\n",
		"internal/secret/s.go":  "package secret\n\nconst S = 1\n",
		"sub/go.mod":            "module example.test/kit/sub\n\ngo 1.22\n\nrequire example.test/kit v0.1.0\n",
		"sub/sub.go":            "package sub\n\nimport \"example.test/kit\"\n\n// Greet greets.\nfunc Greet() string { return kit.Hello() }\n",
		"sub/only/only_test.go": "package only\n",
		"sub/sub_test.go":       "package sub\n\nimport (\n\t\"testing\"\n\n\t\"example.test/kit/internal/secret\"\n)\n\nfunc TestS(t *testing.T) { _ = secret.S }\n",
		"cmd/kit/go.mod":        "module example.test/kit/cmd/kit\n\ngo 1.22\n\nrequire example.test/kit/sub v0.1.0\n\nrequire example.test/kit v0.1.0 // indirect\n",
		"cmd/kit/main.go":       "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.test/kit/sub\"\n)\n\nfunc main() { fmt.Println(sub.Greet()) }\n",
		"examples/go.mod":       "module example.test/kit/examples\n\ngo 1.22\n\nrequire example.test/kit v0.1.0\n",
		"examples/demo/main.go": "package main\n\nimport _ \"example.test/kit/internal/secret\"\n\nfunc main() { undefined() }\n",
		"go.work":               goodWork,
		"docs/modules.md":       "# Modules\n\n<!-- modcheck: module graphs -->\n| module | requires |\n| --- | --- |\n| `.` | nothing |\n| `sub` | nothing |\n| `cmd/kit` | `sub` |\n\nAfter the table.\n",
	}
}

const goodWork = `go 1.22

use (
	.
	./cmd/kit
	./examples
	./sub
)

replace (
	example.test/kit v0.1.0 => ./
	example.test/kit/cmd/kit v0.1.0 => ./cmd/kit
	example.test/kit/sub v0.1.0 => ./sub
)
`

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
		"go mod tidy changes no go.mod or go.sum of the 4 modules",
		"go install example.test/kit/cmd/kit@v0.1.0 ok",
		"the module graph of a consumer of each of the 3 released modules alone holds only what docs/modules.md allows",
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
		"cmd/kit/go.mod:7: requires example.test/kit v0.1.0, not the release version v0.2.0",
		"cmd/kit/go.mod:5: requires example.test/kit/sub v0.1.0, not the release version v0.2.0",
		`go.work:11: replaces example.test/kit "v0.1.0", not the release version v0.2.0`,
		"go.work: does not replace example.test/kit/sub v0.2.0 by ./sub",
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

func TestReplaceDirectiveIsRefused(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/go.mod"] += "\nreplace example.test/kit => ../\n"
	_, err := check(t, files, "")
	mustFail(t, err, "sub/go.mod:7: replace example.test/kit: no go.mod may have a replace directive (`go install pkg@version` refuses the module")
}

func TestInstallStepReportsACommandThatGoInstallRefuses(t *testing.T) {
	t.Parallel()
	// The step on its own (the whole check stops at the replace earlier):
	// go install, as a user runs it, refuses a command whose go.mod has a
	// replace directive, and the step says so.
	files := goodTree()
	files["cmd/kit/go.mod"] += "\nreplace example.test/kit/sub => ../../sub\n"
	root := writeTree(t, files)
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	var released []*mod
	for _, m := range mods {
		if m.Released {
			released = append(released, m)
		}
	}
	tmp := t.TempDir()
	if _, err := buildProxy(filepath.Join(tmp, "proxy"), root, released, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	env := consumerEnv(os.Environ(), filepath.Join(tmp, "proxy"), "off", mods[0].Path, filepath.Join(tmp, "modcache"))
	t.Cleanup(func() { removeAll(filepath.Join(tmp, "modcache")) })
	cmd := modByDir(mods, "cmd/kit")
	probs, err := checkInstall(context.Background(), config{}, []string{cmd.Path}, map[string]*mod{cmd.Path: cmd}, "v0.1.0", env, filepath.Join(tmp, "install"))
	if err != nil {
		t.Fatal(err)
	}
	mustFail(t, probs, "`go install example.test/kit/cmd/kit@v0.1.0` failed", "replace directives")
}

func TestGoWorkMustUseEveryModuleAndReplaceTheReleaseVersion(t *testing.T) {
	t.Parallel()
	files := goodTree()
	delete(files, "go.work")
	_, err := check(t, files, "")
	mustFail(t, err, "go.work: missing")

	files = goodTree()
	files["go.work"] = strings.Replace(goodWork, "\t./sub\n", "", 1)
	files["go.work"] = strings.Replace(files["go.work"], "\texample.test/kit/cmd/kit v0.1.0 => ./cmd/kit\n", "\texample.test/kit/cmd/kit v0.1.0 => ./sub\n", 1)
	_, err = check(t, files, "")
	mustFail(t, err,
		"go.work: does not use ./sub",
		"go.work:11: replaces example.test/kit/cmd/kit v0.1.0 by ./sub, not by its folder ./cmd/kit",
		"go.work: does not replace example.test/kit/cmd/kit v0.1.0 by ./cmd/kit",
	)
}

func TestUntidyGoModIsReported(t *testing.T) {
	t.Parallel()
	files := goodTree()
	// sub imports the root module but no longer requires it.
	files["sub/go.mod"] = "module example.test/kit/sub\n\ngo 1.22\n"
	_, err := check(t, files, "")
	mustFail(t, err, "sub/go.mod: not tidy: `go mod tidy` makes these changes (- committed, + tidy):\n  + require example.test/kit v0.1.0")
}

func TestGoSumLineOfTheRepositorysOwnModuleIsReported(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/go.sum"] = "example.test/kit v0.1.0/go.mod h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
	_, err := check(t, files, "")
	mustFail(t, err, `sub/go.sum: holds "example.test/kit v0.1.0/go.mod h1:`, "no line of the repository's own modules")
}

func TestTidyModeWritesGoModAndGoSumWithoutTheRepositorysOwnLines(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["sub/go.mod"] = "module example.test/kit/sub\n\ngo 1.22\n"
	root := writeTree(t, files)
	var log bytes.Buffer
	if err := run(context.Background(), config{Root: root, Upstream: "off", Log: &log, Tidy: true, TidyDirs: []string{"sub"}}); err != nil {
		t.Fatalf("-tidy sub: %v\n%s", err, log.String())
	}
	gomod, err := os.ReadFile(filepath.Join(root, "sub", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "module example.test/kit/sub\n\ngo 1.22\n\nrequire example.test/kit v0.1.0\n"; string(gomod) != want {
		t.Errorf("sub/go.mod after -tidy:\n%s\nwant:\n%s", gomod, want)
	}
	if sum, err := os.ReadFile(filepath.Join(root, "sub", "go.sum")); err != nil || len(sum) != 0 {
		t.Errorf("sub/go.sum after -tidy: %q, %v; want it empty (the root module's lines left out)", sum, err)
	}
	// The tidied tree passes.
	if err := run(context.Background(), config{Root: root, Upstream: "off", Log: &log}); err != nil {
		t.Fatalf("the tidied tree fails: %v\n%s", err, log.String())
	}
}

func TestGraphBeyondTheTableIsRefused(t *testing.T) {
	t.Parallel()
	files := goodTree()
	// sub's go.mod requires the command module (say, for a test), which
	// its row of docs/modules.md does not allow: every user of sub would
	// have it in their module graph.
	files["sub/go.mod"] = "module example.test/kit/sub\n\ngo 1.22\n\nrequire (\n\texample.test/kit v0.1.0\n\texample.test/kit/cmd/kit v0.1.0\n)\n"
	files["sub/cmd_test.go"] = "package sub\n\nimport _ \"example.test/kit/cmd/kit\"\n"
	_, err := check(t, files, "")
	mustFail(t, err,
		"the module graph of a consumer of example.test/kit/sub alone holds what docs/modules.md does not allow",
		"example.test/kit/sub@v0.1.0 requires example.test/kit/cmd/kit@v0.1.0 (docs/modules.md:7 does not allow it for `sub`)",
	)
}

func TestGraphTableMustNameEveryReleasedModule(t *testing.T) {
	t.Parallel()
	files := goodTree()
	files["docs/modules.md"] = strings.Replace(files["docs/modules.md"], "| `sub` | nothing |\n", "| `nope` | `elsewhere` |\n", 1)
	_, err := check(t, files, "")
	mustFail(t, err,
		"docs/modules.md: the table of module graphs has no row for `sub` (example.test/kit/sub)",
		"docs/modules.md:7: the table of module graphs names `nope`, which is no released module",
		"docs/modules.md:7: `elsewhere` is neither a module path",
	)
}

func TestAllowedPatterns(t *testing.T) {
	a := allowed{patterns: []string{"golang.org/x/...", "github.com/redis/go-redis/v9"}}
	for p, want := range map[string]bool{
		"golang.org/x":                    true,
		"golang.org/x/text":               true,
		"golang.org/xtra":                 false,
		"github.com/redis/go-redis/v9":    true,
		"github.com/redis/go-redis/v9/x":  false,
		"github.com/redis/go-redis":       false,
		"github.com/gin-gonic/gin":        false,
		"github.com/idemkit/idemkit/nope": false,
	} {
		if got := a.allows(p); got != want {
			t.Errorf("allows(%q) = %v, want %v", p, got, want)
		}
	}
}
