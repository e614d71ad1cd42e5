package idemkit_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestMarkdownGoBlocksCompile compiles every ```go block of README.md and
// docs/*.md. Each block is built as a package of its own in a temporary
// module that requires the repository's modules through replaces (GOWORK=off,
// -mod=mod), then vetted; a block must define every name it uses.
//
// A README block must be a complete file, a package clause and its own
// imports, and is compiled as written: a reader copies it and it builds. A
// block of docs/*.md may be one too, or top-level declarations alone, to
// which the test adds a package clause and the imports of the packages the
// block names (see snippetImports). A compiler or vet error points at the
// markdown file and line through a //line directive.
func TestMarkdownGoBlocksCompile(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(docs)
	files := append([]string{filepath.Join(root, "README.md")}, docs...)

	var blocks []mdBlock
	notCompiled := 0
	for _, f := range files {
		bs, err := readBlocks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			isGo := strings.EqualFold(b.lang, "go") || strings.EqualFold(b.lang, "golang")
			switch {
			case isGo && b.marked != "":
				t.Errorf("%s:%d: a Go block is marked %q: Go blocks are always compiled", b.file, b.line, b.marked)
			case isGo:
				blocks = append(blocks, b)
			case b.marked == "":
				t.Errorf("%s:%d: a ```%s block without a `<!-- not compiled: REASON -->` line before it", b.file, b.line, b.lang)
			default:
				notCompiled++
			}
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go block found in README.md or docs/*.md")
	}

	modules, err := repoModules(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	used := map[string]bool{"github.com/idemkit/idemkit": true}
	for i, b := range blocks {
		src, imports, err := snippetSource(b)
		if err != nil {
			t.Errorf("%s:%d: %v", b.file, b.line, err)
			continue
		}
		for _, p := range imports {
			if m := moduleOf(p, modules); m != "" {
				used[m] = true
			}
		}
		pkg := filepath.Join(dir, fmt.Sprintf("b%03d", i))
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "snippet.go"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}

	var mod strings.Builder
	mod.WriteString("module idemkit.test/snippets\n\ngo 1.26.0\n\n")
	for _, m := range sortedKeys(used) {
		fmt.Fprintf(&mod, "require %s v0.0.0\n", m)
	}
	for _, m := range sortedKeys(modules) {
		fmt.Fprintf(&mod, "replace %s => %s\n", m, modules[m])
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// The repository's go.sum files hold the hashes of every third-party
	// module the snippets can reach, so nothing new needs verifying.
	sums, err := collectSums(modules)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sums, 0o644); err != nil {
		t.Fatal(err)
	}

	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false")
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in the snippets' module: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Logf("%d Go blocks compiled and vetted; %d other blocks marked not compiled", len(blocks), notCompiled)
}

// mdBlock is one fenced code block of a markdown file.
type mdBlock struct {
	file   string // relative to the repository root
	line   int    // line of the first line of code
	lang   string // the first word of the fence's info string ("" when none)
	marked string // the reason of a `<!-- not compiled: ... -->` line before it
	code   string // with the fence's indentation removed
}

var (
	fenceRE       = regexp.MustCompile("^([ \t]*)```[ \t]*([^ \t`]*)[^`]*$")
	notCompiledRE = regexp.MustCompile(`^\s*<!-- not compiled: (.+?) -->\s*$`)
)

// readBlocks returns the fenced blocks of a markdown file. An unclosed
// fence is an error.
func readBlocks(root, path string) ([]mdBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return nil, err
	}
	var (
		blocks   []mdBlock
		cur      *mdBlock
		indent   string
		code     strings.Builder
		lastText string // the last non-blank line outside a block
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if cur == nil {
			if m := fenceRE.FindStringSubmatch(line); m != nil {
				cur = &mdBlock{file: filepath.ToSlash(rel), line: n + 1, lang: m[2]}
				if mm := notCompiledRE.FindStringSubmatch(lastText); mm != nil {
					cur.marked = mm[1]
				}
				indent = m[1]
				code.Reset()
				continue
			}
			if strings.TrimSpace(line) != "" {
				lastText = line
			}
			continue
		}
		if strings.TrimSpace(line) == "```" {
			cur.code = code.String()
			blocks = append(blocks, *cur)
			cur, lastText = nil, ""
			continue
		}
		code.WriteString(strings.TrimPrefix(line, indent))
		code.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: unclosed code block", rel, cur.line-1)
	}
	return blocks, nil
}

// snippetImports maps the package names blocks of docs/*.md may use
// without importing them to their import paths. README blocks import
// what they use.
var snippetImports = map[string]string{
	"bytes":           "bytes",
	"context":         "context",
	"errors":          "errors",
	"fmt":             "fmt",
	"http":            "net/http",
	"io":              "io",
	"log":             "log",
	"slog":            "log/slog",
	"os":              "os",
	"strings":         "strings",
	"time":            "time",
	"idemkit":         "github.com/idemkit/idemkit",
	"fingerprint":     "github.com/idemkit/idemkit/fingerprint",
	"lock":            "github.com/idemkit/idemkit/lock",
	"middleware":      "github.com/idemkit/idemkit/middleware",
	"nethttp":         "github.com/idemkit/idemkit/nethttp",
	"store":           "github.com/idemkit/idemkit/store",
	"memstore":        "github.com/idemkit/idemkit/store/memstore",
	"redisstore":      "github.com/idemkit/idemkit/store/redisstore",
	"pgstore":         "github.com/idemkit/idemkit/store/pgstore",
	"mysqlstore":      "github.com/idemkit/idemkit/store/mysqlstore",
	"sql":             "database/sql",
	"firestorestore":  "github.com/idemkit/idemkit/store/firestorestore",
	"dynamostore":     "github.com/idemkit/idemkit/store/dynamostore",
	"ginadapter":      "github.com/idemkit/idemkit/ginadapter",
	"echoadapter":     "github.com/idemkit/idemkit/echoadapter",
	"grpcinterceptor": "github.com/idemkit/idemkit/grpcinterceptor",
	"idemkitotel":     "github.com/idemkit/idemkit/idemkitotel",
	"gin":             "github.com/gin-gonic/gin",
	"echo":            "github.com/labstack/echo/v4",
	"grpc":            "google.golang.org/grpc",
	"credentials":     "google.golang.org/grpc/credentials",
	"redis":           "github.com/redis/go-redis/v9",
	"pgxpool":         "github.com/jackc/pgx/v5/pgxpool",
	"firestore":       "cloud.google.com/go/firestore",
	"dynamodb":        "github.com/aws/aws-sdk-go-v2/service/dynamodb",
}

// snippetSource returns the source of a block's package, with a //line
// directive that points errors at the markdown, and the packages it
// imports.
func snippetSource(b mdBlock) ([]byte, []string, error) {
	directive := fmt.Sprintf("//line %s:%d\n", b.file, b.line)
	if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
		f, err := parser.ParseFile(token.NewFileSet(), b.file, b.code, parser.ImportsOnly)
		if err != nil {
			return nil, nil, err
		}
		var imports []string
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return nil, nil, err
			}
			imports = append(imports, p)
		}
		return []byte(directive + b.code), imports, nil
	}
	if b.file == "README.md" {
		return nil, nil, errors.New("a README block must be a complete file, a package clause and its own imports, so that a reader can copy it as it is")
	}
	// The packages the block names: identifiers followed by a dot, read
	// by the Go scanner so that comments and strings do not count.
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(b.code)
	var scanErr error
	s.Init(fset.AddFile(b.file, -1, len(src)), src, func(pos token.Position, msg string) {
		if scanErr == nil {
			scanErr = fmt.Errorf("line %d: %s", b.line+pos.Line-1, msg)
		}
	}, 0)
	names := map[string]bool{}
	prev, prevLit := token.ILLEGAL, ""
	prevPrev := token.ILLEGAL
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		// x.Sel where x is not itself a selector's field (a.b.c names a).
		if tok == token.PERIOD && prev == token.IDENT && prevPrev != token.PERIOD {
			names[prevLit] = true
		}
		prevPrev, prev, prevLit = prev, tok, lit
	}
	if scanErr != nil {
		return nil, nil, scanErr
	}
	var imports []string
	for name := range names {
		if p, ok := snippetImports[name]; ok {
			imports = append(imports, p)
		}
	}
	sort.Strings(imports)
	var out strings.Builder
	out.WriteString("package snippet\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&out, "\t%q\n", p)
	}
	out.WriteString(")\n\n")
	out.WriteString(directive)
	out.WriteString(b.code)
	return []byte(out.String()), imports, nil
}

// repoModules maps the module path of every go.mod in the repository to
// its directory.
func repoModules(root string) (map[string]string, error) {
	mods := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
				mods[f[1]] = filepath.Dir(path)
				break
			}
		}
		return nil
	})
	return mods, err
}

// moduleOf returns the repository module that holds an import path, or ""
// for a package of another module.
func moduleOf(path string, modules map[string]string) string {
	best := ""
	for m := range modules {
		if (path == m || strings.HasPrefix(path, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// collectSums joins the go.sum files of the repository's modules.
func collectSums(modules map[string]string) ([]byte, error) {
	seen := map[string]bool{}
	var lines []string
	for _, dir := range modules {
		data, err := os.ReadFile(filepath.Join(dir, "go.sum"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" && !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestReadmeInstallLines: every `go get` line of the README names a module
// of the repository, and every repository module a README block imports
// has its line, so that the Install part and the blocks cannot drift apart.
func TestReadmeInstallLines(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	modules, err := repoModules(root)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readBlocks(root, filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, b := range blocks {
		for i, line := range strings.Split(b.code, "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "go" || f[1] != "get" {
				continue
			}
			path, _, _ := strings.Cut(f[2], "@")
			if _, ok := modules[path]; !ok {
				t.Errorf("README.md:%d: go get %s: no module of the repository has that path", b.line+i, path)
			}
			listed[path] = true
		}
	}
	if len(listed) == 0 {
		t.Fatal("README.md has no go get line")
	}
	for _, b := range blocks {
		if !strings.EqualFold(b.lang, "go") {
			continue
		}
		_, imports, err := snippetSource(b)
		if err != nil {
			t.Fatalf("README.md:%d: %v", b.line, err)
		}
		for _, p := range imports {
			if m := moduleOf(p, modules); m != "" && !listed[m] {
				t.Errorf("README.md:%d: the block imports %s, but no go get line names its module %s", b.line, p, m)
			}
		}
	}
}

// TestMarkdownLinksResolve: every relative link of README.md and docs/*.md
// names a file or folder of the repository.
func TestMarkdownLinksResolve(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for n, line := range strings.Split(string(data), "\n") {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, ":") {
					continue // an anchor in the same file, or a URL
				}
				checked++
				if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
					t.Errorf("%s:%d: the link to %s: %v", rel, n+1, m[1], err)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found")
	}
}
