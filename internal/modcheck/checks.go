package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// checkNoReplace finds go.mod files with replace directives: `go install
// pkg@version` refuses a module whose go.mod has one, and a user's build
// ignores them anyway. Work inside the repository ties the modules
// together with go.work instead.
func checkNoReplace(mods []*mod) Problems {
	var probs Problems
	for _, m := range mods {
		for _, r := range m.File.Replace {
			probs = append(probs, fmt.Sprintf("%s:%d: replace %s: no go.mod may have a replace directive (`go install pkg@version` refuses the module; go.work ties the modules together for work inside the repository)",
				goModName(m), r.Syntax.Start.Line, r.Old.Path))
		}
	}
	return probs
}

// checkWorkspace checks the go.work at the root: it uses every module of
// the tree and nothing else, and it replaces exactly the release version
// of each released module by that module's folder (without these the go
// command reads the go.mod of that version from the module proxy, where it
// does not exist before the release).
func checkWorkspace(root string, mods []*mod, version string) Problems {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Problems{"go.work: missing: the repository's go.work ties its modules together for work inside it (it uses every module and replaces each released module's release version by its folder)"}
	}
	if err != nil {
		return Problems{err.Error()}
	}
	wf, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return Problems{err.Error()}
	}
	var probs Problems
	used := map[string]bool{}
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		used[dir] = true
	}
	byDir := map[string]*mod{}
	for _, m := range mods {
		byDir[m.Dir] = m
		if !used[m.Dir] {
			probs = append(probs, fmt.Sprintf("go.work: does not use ./%s (every module of the tree is in the workspace)", m.Dir))
		}
	}
	for _, u := range wf.Use {
		if byDir[path.Clean(filepath.ToSlash(u.Path))] == nil {
			probs = append(probs, fmt.Sprintf("go.work:%d: uses %s, which is no module of the tree", u.Syntax.Start.Line, u.Path))
		}
	}
	replaced := map[string]bool{}
	for _, r := range wf.Replace {
		m := modByPath(mods, r.Old.Path)
		want := ""
		if m != nil {
			want = workPath(m.Dir)
		}
		switch {
		case m == nil || !m.Released:
			probs = append(probs, fmt.Sprintf("go.work:%d: replaces %s, which is no released module of the tree", r.Syntax.Start.Line, r.Old.Path))
		case r.Old.Version != version:
			probs = append(probs, fmt.Sprintf("go.work:%d: replaces %s %q, not the release version %s (scripts/release.sh sets it)", r.Syntax.Start.Line, r.Old.Path, r.Old.Version, version))
		case r.New.Version != "" || path.Clean(r.New.Path) != path.Clean(want):
			probs = append(probs, fmt.Sprintf("go.work:%d: replaces %s %s by %s, not by its folder %s", r.Syntax.Start.Line, r.Old.Path, version, r.New.Path, want))
		default:
			replaced[r.Old.Path] = true
		}
	}
	for _, m := range mods {
		if m.Released && !replaced[m.Path] {
			probs = append(probs, fmt.Sprintf("go.work: does not replace %s %s by %s", m.Path, version, workPath(m.Dir)))
		}
	}
	return probs
}

// workPath is a module's folder as go.work names it.
func workPath(dir string) string {
	if dir == "." {
		return "./"
	}
	return "./" + dir
}

func modByPath(mods []*mod, p string) *mod {
	for _, m := range mods {
		if m.Path == p {
			return m
		}
	}
	return nil
}

// graphsDoc is the document whose table says what each released module
// brings into its users' module graphs: the one place that list is kept.
const graphsDoc = "docs/modules.md"

// graphsMarker precedes that table in graphsDoc.
const graphsMarker = "<!-- modcheck: module graphs -->"

// allowed is one released module's row of the table: the patterns of the
// modules a consumer of it alone may have in its module graph, beside the
// module itself and the root module. A pattern is a module path, or a path
// prefix ending in "/..." (the path itself and every path under it).
type allowed struct {
	line     int
	patterns []string
}

func (a allowed) allows(p string) bool {
	for _, pat := range a.patterns {
		if prefix, ok := strings.CutSuffix(pat, "/..."); ok {
			if p == prefix || strings.HasPrefix(p, prefix+"/") {
				return true
			}
		} else if p == pat {
			return true
		}
	}
	return false
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readGraphs reads the table that follows graphsMarker in graphsDoc: one
// row per released module, its folder (`.` for the root) in backticks in
// the first cell and the patterns in backticks in the second (none: the
// module brings nothing).
func readGraphs(root string, released []*mod, rootPath string) (map[string]allowed, Problems) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(graphsDoc)))
	if err != nil {
		return nil, Problems{fmt.Sprintf("%s: %v (its table of module graphs is what the graph check allows)", graphsDoc, err)}
	}
	rows := map[string]allowed{}
	var probs Problems
	sc := bufio.NewScanner(bytes.NewReader(data))
	n, in, seen := 0, false, false
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == graphsMarker {
			in, seen = true, true
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(rows) != 0 {
				break // the table ended
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			continue
		}
		first := backticked.FindStringSubmatch(cells[0])
		if first == nil {
			continue // the header and its separator
		}
		dir := first[1]
		var pats []string
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			pats = append(pats, m[1])
		}
		if _, dup := rows[dir]; dup {
			probs = append(probs, fmt.Sprintf("%s:%d: a second row for %s", graphsDoc, n, dir))
		}
		rows[dir] = allowed{line: n, patterns: pats}
	}
	if !seen {
		return nil, Problems{fmt.Sprintf("%s: no line %s before the table of module graphs", graphsDoc, graphsMarker)}
	}
	for _, m := range released {
		if _, ok := rows[m.Dir]; !ok {
			probs = append(probs, fmt.Sprintf("%s: the table of module graphs has no row for `%s` (%s)", graphsDoc, m.Dir, m.Path))
		}
	}
	for dir, a := range rows {
		if m := modByDir(released, dir); m == nil {
			probs = append(probs, fmt.Sprintf("%s:%d: the table of module graphs names `%s`, which is no released module", graphsDoc, a.line, dir))
		}
	}
	// A pattern whose first element has no dot is a folder of the tree:
	// that module, and what its row allows.
	resolved := map[string]allowed{}
	for dir, a := range rows {
		var pats []string
		seen := map[string]bool{dir: true}
		var add func(a allowed)
		add = func(a allowed) {
			for _, p := range a.patterns {
				first, _, _ := strings.Cut(p, "/")
				if strings.Contains(first, ".") {
					pats = append(pats, p)
					continue
				}
				m := modByDir(released, p)
				if m == nil {
					probs = append(probs, fmt.Sprintf("%s:%d: `%s` is neither a module path (its first element has a dot) nor the folder of a released module", graphsDoc, a.line, p))
					continue
				}
				pats = append(pats, m.Path)
				if !seen[p] {
					seen[p] = true
					add(rows[p])
				}
			}
		}
		add(a)
		resolved[dir] = allowed{line: a.line, patterns: pats}
	}
	sort.Strings(probs)
	return resolved, probs
}

func modByDir(mods []*mod, dir string) *mod {
	for _, m := range mods {
		if m.Dir == dir {
			return m
		}
	}
	return nil
}

// checkTidy runs `go mod tidy` for every module as a user's go command
// sees it (no workspace: the repository's modules at the release version
// from the proxy of the tree), on copies of its go.mod and go.sum
// (-modfile), and reports every difference from the committed files. The
// go.sum lines of the repository's own modules are left out of the
// comparison and must not be committed: they would hash the tree as it is,
// which changes with every edit, and no build needs them (inside the
// repository the workspace uses the folders; a user's go.sum gets the
// released modules' hashes from the checksum database).
//
// With write, it writes the tidy go.mod and go.sum (without those lines)
// into the module instead, and reports only a tidy that fails.
func checkTidy(ctx context.Context, cfg config, root string, mods []*mod, rootPath string, env []string, tmp string, write bool) (Problems, error) {
	var probs Problems
	for _, m := range mods {
		t := time.Now()
		dir := filepath.Join(tmp, strings.ReplaceAll(m.Dir, "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		modDir := filepath.Join(root, filepath.FromSlash(m.Dir))
		sum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		gomod, gosum := filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum")
		if err := os.WriteFile(gomod, m.Data, 0o644); err != nil {
			return nil, err
		}
		// Tidy starts from the committed lines but those of the
		// repository's modules (reported below), which would fail it.
		var start []string
		for _, line := range strings.SplitAfter(string(sum), "\n") {
			if f := strings.Fields(line); len(f) == 0 || !ours(f[0], rootPath) {
				start = append(start, line)
			}
		}
		if err := os.WriteFile(gosum, []byte(strings.Join(start, "")), 0o644); err != nil {
			return nil, err
		}
		out, err := runGo(ctx, modDir, env, []string{"go", "mod", "tidy", "-modfile=" + gomod})
		if cfg.Verbose && len(out) != 0 {
			cfg.Log.Write(out)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			probs = append(probs, fmt.Sprintf("%s: `go mod tidy` (no workspace, the repository's modules at the release version from the proxy of the tree) failed: %v\n%s",
				goModName(m), err, strings.TrimRight(string(out), "\n")))
			continue
		}
		tidyMod, err := os.ReadFile(gomod)
		if err != nil {
			return nil, err
		}
		tidySum, err := os.ReadFile(gosum)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if write {
			var kept []string
			for _, line := range strings.SplitAfter(string(tidySum), "\n") {
				if f := strings.Fields(line); len(f) == 0 || !ours(f[0], rootPath) {
					kept = append(kept, line)
				}
			}
			if err := os.WriteFile(filepath.Join(modDir, "go.mod"), tidyMod, 0o644); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(modDir, "go.sum"), []byte(strings.Join(kept, "")), 0o644); err != nil {
				return nil, err
			}
			logf(cfg, "modcheck: tidied %s in %s", m.Dir, since(t))
			continue
		}
		if d := lineDiff(m.Data, tidyMod, nil); d != "" {
			probs = append(probs, fmt.Sprintf("%s: not tidy: `go mod tidy` makes these changes (- committed, + tidy):\n%s", goModName(m), d))
		}
		notOurs := func(line string) bool {
			f := strings.Fields(line)
			return len(f) == 0 || !ours(f[0], rootPath)
		}
		// The committed go.sum must hold no line of the repository's
		// modules; the tidy one's are dropped.
		if d := lineDiff(sum, tidySum, notOurs); d != "" {
			probs = append(probs, fmt.Sprintf("%s: not tidy: `go mod tidy` makes these changes (- committed, + tidy; the lines of the repository's own modules are never committed):\n%s", path.Join(m.Dir, "go.sum"), d))
		}
		for _, line := range strings.Split(string(sum), "\n") {
			if !notOurs(line) {
				probs = append(probs, fmt.Sprintf("%s: holds %q: the go.sum files hold no line of the repository's own modules (they would hash the tree as it is)", path.Join(m.Dir, "go.sum"), line))
			}
		}
		if cfg.Verbose {
			logf(cfg, "modcheck: tidy %s ok in %s", m.Dir, since(t))
		}
	}
	return probs, nil
}

// lineDiff lists the lines only in a ("- ") and only in b ("+ "), in
// order; keep, when not nil, says which lines of b count.
func lineDiff(a, b []byte, keep func(string) bool) string {
	split := func(data []byte, filter bool) []string {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			if l == "" && len(data) == 0 {
				continue
			}
			if filter && keep != nil && !keep(l) {
				continue
			}
			lines = append(lines, l)
		}
		return lines
	}
	al, bl := split(a, false), split(b, true)
	if strings.Join(al, "\n") == strings.Join(bl, "\n") {
		return ""
	}
	count := func(lines []string) map[string]int {
		c := map[string]int{}
		for _, l := range lines {
			c[l]++
		}
		return c
	}
	ac, bc := count(al), count(bl)
	var d strings.Builder
	for _, l := range al {
		if bc[l] == 0 {
			fmt.Fprintf(&d, "  - %s\n", l)
		}
	}
	for _, l := range bl {
		if ac[l] == 0 {
			fmt.Fprintf(&d, "  + %s\n", l)
		}
	}
	if d.Len() == 0 {
		d.WriteString("  (the same lines in another order)\n")
	}
	return strings.TrimRight(d.String(), "\n")
}

// checkInstall runs `go install cmd@version` for every command, from a
// directory outside any module, as a Go user installs one: with the proxy
// of the tree and without -mod=mod (which go install refuses), into a bin
// directory of its own; then `go version -m` must show the binary built
// from the command's module at version.
func checkInstall(ctx context.Context, cfg config, commands []string, modules map[string]*mod, version string, env []string, tmp string) (Problems, error) {
	bin := filepath.Join(tmp, "bin")
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	env = setEnv(env, "GOFLAGS", "", "GOBIN", bin)
	var probs Problems
	for _, cmd := range commands {
		t := time.Now()
		out, err := runGo(ctx, work, env, []string{"go", "install", "-trimpath", cmd + "@" + version})
		if cfg.Verbose && len(out) != 0 {
			cfg.Log.Write(out)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			probs = append(probs, fmt.Sprintf("`go install %s@%s` failed: %v\n%s", cmd, version, err, strings.TrimRight(string(out), "\n")))
			continue
		}
		exe := filepath.Join(bin, path.Base(cmd))
		out, err = runGo(ctx, work, env, []string{"go", "version", "-m", exe})
		if err != nil {
			probs = append(probs, fmt.Sprintf("`go install %s@%s` made no binary %s: %v\n%s", cmd, version, exe, err, out))
			continue
		}
		modLine := regexp.MustCompile(`(?m)^\tmod\t` + regexp.QuoteMeta(modules[cmd].Path) + `\t` + regexp.QuoteMeta(version) + `(\t|$)`)
		if !bytes.Contains(out, []byte("\tpath\t"+cmd+"\n")) || !modLine.Match(out) {
			probs = append(probs, fmt.Sprintf("`go install %s@%s`: the binary is not the command at %s:\n%s", cmd, version, version, out))
			continue
		}
		logf(cfg, "modcheck: go install %s@%s ok in %s", cmd, version, since(t))
	}
	return probs, nil
}

// setEnv returns env with each key of kvs (key, value, key, value, ...)
// set.
func setEnv(env []string, kvs ...string) []string {
	out := make([]string, 0, len(env)+len(kvs)/2)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for i := 0; i < len(kvs); i += 2 {
			drop = drop || k == kvs[i]
		}
		if !drop {
			out = append(out, kv)
		}
	}
	for i := 0; i < len(kvs); i += 2 {
		out = append(out, kvs[i]+"="+kvs[i+1])
	}
	return out
}

// checkGraphs makes, for each released module, a consumer whose go.mod
// requires it alone, and reads that consumer's module graph (go mod
// graph). Every requirement the repository's modules put into it must be
// one that their row of graphsDoc allows: a module of the repository must
// require nothing else, so its users' graphs hold nothing else (beside
// what those allowed modules require in turn, which is theirs to choose).
func checkGraphs(ctx context.Context, cfg config, root string, released []*mod, graphs map[string]allowed, rootPath, version string, env []string, tmp string) (Problems, error) {
	byPath := map[string]*mod{}
	for _, m := range released {
		byPath[m.Path] = m
	}
	sums, err := seedSums(root, released, rootPath)
	if err != nil {
		return nil, err
	}
	goVersion := "1.21"
	if f := released[0].File; f.Go != nil {
		goVersion = f.Go.Version
	}
	var probs Problems
	for _, m := range released {
		dir := filepath.Join(tmp, strings.ReplaceAll(m.Dir, "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		gomod := fmt.Sprintf("module example.com/modcheck/graph\n\ngo %s\n\nrequire %s %s\n", goVersion, m.Path, version)
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.sum"), sums, 0o644); err != nil {
			return nil, err
		}
		out, err := runGo(ctx, dir, env, []string{"go", "mod", "graph"})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			probs = append(probs, fmt.Sprintf("a consumer of %s alone: go mod graph failed: %v\n%s", m.Path, err, strings.TrimRight(string(out), "\n")))
			continue
		}
		var bad []string
		seen := map[string]bool{}
		nodes := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			from, to, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			nodes[to] = true
			fromPath, _, _ := strings.Cut(from, "@")
			toPath, _, _ := strings.Cut(to, "@")
			req := byPath[fromPath]
			if req == nil || toPath == "go" || toPath == "toolchain" || toPath == rootPath {
				continue // the consumer's own requirement, a third party's, or the go version
			}
			if !graphs[req.Dir].allows(toPath) && !seen[line] {
				seen[line] = true
				bad = append(bad, fmt.Sprintf("%s requires %s (%s:%d does not allow it for `%s`)", from, to, graphsDoc, graphs[req.Dir].line, req.Dir))
			}
		}
		if len(bad) != 0 {
			sort.Strings(bad)
			probs = append(probs, fmt.Sprintf("the module graph of a consumer of %s alone holds what %s does not allow (a go.mod requires more than its packages and their tests need, or the table is out of date):\n  %s",
				m.Path, graphsDoc, strings.Join(bad, "\n  ")))
			continue
		}
		if cfg.Verbose {
			logf(cfg, "modcheck: the graph of a consumer of %s alone: %d modules, every requirement of the repository's modules allowed", m.Path, len(nodes))
		}
	}
	return probs, nil
}

// tidy is the -tidy mode: go mod tidy, as the check runs it, in the
// modules of cfg.TidyDirs (every module when empty), written back.
func tidy(ctx context.Context, cfg config, root string, mods, released []*mod, rootPath, version string) error {
	sel := mods
	if len(cfg.TidyDirs) != 0 {
		sel = nil
		for _, d := range cfg.TidyDirs {
			m := modByDir(mods, path.Clean(filepath.ToSlash(d)))
			if m == nil {
				return fmt.Errorf("-tidy %s: no module of the tree has that folder", d)
			}
			sel = append(sel, m)
		}
	}
	tmp, err := os.MkdirTemp("", "modcheck-")
	if err != nil {
		return err
	}
	defer removeAll(tmp)
	proxyDir := filepath.Join(tmp, "proxy")
	if _, err := buildProxy(proxyDir, root, released, version); err != nil {
		return Problems{err.Error()}
	}
	env := consumerEnv(os.Environ(), proxyDir, cfg.Upstream, rootPath, filepath.Join(tmp, "modcache"))
	probs, err := checkTidy(ctx, cfg, root, sel, rootPath, env, filepath.Join(tmp, "tidy"), true)
	if err != nil {
		return err
	}
	if len(probs) != 0 {
		return probs
	}
	return nil
}
