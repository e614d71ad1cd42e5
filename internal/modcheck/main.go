// Command modcheck checks, from the repository's tree, that a module outside
// the repository can use every released module at one version, with no
// replace directive and no go.work: the way a user's `go get` and `go
// install` see them. docs/modules.md describes it.
//
//	go run ./internal/modcheck                    the version the go.mod files require
//	go run ./internal/modcheck -version v0.2.0    another version
//	go run ./internal/modcheck -keep -v           keep the temporary directory, show go's output
//	go run ./internal/modcheck -tidy [folder ...] go mod tidy as the check runs it, written back
//
// Run it from the root module (or name the root with -root). It fails when:
//
//   - a go.mod requires a module of the repository at v0.0.0, or at any
//     version other than the one checked, or requires one the tree lacks
//     or does not release; or has a replace directive (go install refuses
//     the module);
//   - go.work does not use every module of the tree, or does not replace
//     exactly the release version of each released module by its folder;
//   - a released module other than the root has a non-test .go file that
//     imports the root module's internal/ packages (its tests may);
//   - docs/modules.md has no table of module graphs naming every released
//     module;
//   - a module proxy built from the tree cannot serve a released module at
//     the version (the module zip rules of golang.org/x/mod/zip);
//   - `go mod tidy` without the workspace would change a module's go.mod,
//     or its go.sum beside the lines of the repository's own modules
//     (which no go.sum may hold: they would hash the tree as it is);
//   - a throwaway consumer module, which imports every package of every
//     released module that a user can import (and builds the commands as
//     tools), fails `go mod tidy` or `go build ./...`;
//   - `go install cmd@version` of a command fails, run outside any module
//     without -mod=mod, as a Go user installs one;
//   - the module graph (go mod graph) of a consumer that requires one
//     released module alone holds a requirement of the repository's modules
//     that the module's row of the table in docs/modules.md does not allow.
//
// The released modules are every module of the tree but those under
// examples/ and bench/, which are never tagged. The proxy is a directory in
// the layout of GOPROXY=file://... (the .info, .mod and .zip of each
// released module at the version, and its list), made from the working
// tree as it is. Every go command the check runs has GOWORK=off and
// resolves the repository's modules from that proxy only, and everything
// else from the module cache's download directory and then `go env
// GOPROXY`, in a module cache of its own (so the versions it downloads
// never land in the user's module cache, where a later check would find
// them stale). The consumers' go.sum starts with the released modules'
// go.sum lines, so other modules are verified against the hashes the
// repository already recorded (anything else against the checksum
// database as usual); the repository's own modules are exempt from the
// checksum database (GONOSUMDB), as they are not published yet.
//
// With -tidy it checks nothing: it runs `go mod tidy` that same way in the
// modules named by their folders (every module by default) and writes
// their go.mod and go.sum, without the lines of the repository's own
// modules. Plain `go mod tidy` ignores go.work and would look the siblings
// up at the release version on the public proxy.
//
// The exit status is 0 when every check passes and 1 otherwise, with every
// problem found on standard error.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/build"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.Root, "root", ".", "the repository's root: the directory of the root module's go.mod")
	flag.StringVar(&cfg.Version, "version", "", "the release version to check (default: the one the go.mod files require)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the temporary directory (proxy and consumer) and print its path")
	flag.BoolVar(&cfg.Verbose, "v", false, "print the output of the go commands the consumer runs")
	flag.BoolVar(&cfg.Tidy, "tidy", false, "run go mod tidy in the modules named by their folders (default: every module) as the check sees it, and write their go.mod and go.sum; check nothing")
	flag.Parse()
	cfg.TidyDirs = flag.Args()
	if flag.NArg() != 0 && !cfg.Tidy {
		fmt.Fprintln(os.Stderr, "usage: modcheck [-root dir] [-version vX.Y.Z] [-keep] [-v]\n       modcheck -tidy [folder ...]")
		os.Exit(2)
	}
	cfg.Log = os.Stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	upstream, err := defaultUpstream(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modcheck:", err)
		os.Exit(1)
	}
	cfg.Upstream = upstream
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "modcheck: FAIL")
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// config is what one check needs.
type config struct {
	// Root is the directory of the root module.
	Root string
	// Version is the version checked; empty means the one every go.mod
	// requires (they must agree).
	Version string
	// Upstream is the GOPROXY list the consumer falls back to for modules
	// outside the repository ("off" for none).
	Upstream string
	// Keep keeps the temporary directory.
	Keep bool
	// Tidy, instead of the checks, tidies the modules in TidyDirs (every
	// module when empty) and writes their go.mod and go.sum.
	Tidy     bool
	TidyDirs []string
	// Verbose copies the go commands' output to Log.
	Verbose bool
	// Log receives progress lines.
	Log io.Writer
}

// Problems is the error run returns when the tree fails a check: one line
// per problem found.
type Problems []string

func (p Problems) Error() string { return strings.Join(p, "\n") }

// mod is one module of the tree.
type mod struct {
	Dir      string // slash-separated, relative to the root; "." for the root
	Path     string
	File     *modfile.File
	Data     []byte // the go.mod as it is on disk
	Released bool
}

// defaultUpstream is where the consumer finds modules outside the
// repository: the module cache's download directory (a file proxy of what
// this machine already has), then `go env GOPROXY`.
func defaultUpstream(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return "", fmt.Errorf("go env GOMODCACHE GOPROXY: unexpected output %q", out)
	}
	proxy := strings.TrimSpace(lines[1])
	if proxy == "" {
		proxy = "https://proxy.golang.org,direct"
	}
	download := filepath.Join(strings.TrimSpace(lines[0]), "cache", "download")
	if _, err := os.Stat(download); err != nil {
		return proxy, nil
	}
	return fileURL(download) + "," + proxy, nil
}

// run performs every check; it returns Problems when the tree fails one and
// another error when the check itself could not run.
func run(ctx context.Context, cfg config) error {
	start := time.Now()
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return err
	}
	mods, err := findModules(root)
	if err != nil {
		return err
	}
	if len(mods) == 0 || mods[0].Dir != "." {
		return fmt.Errorf("%s: no go.mod at the root", root)
	}
	rootPath := mods[0].Path

	version := cfg.Version
	if version == "" {
		v, probs := requiredVersion(mods, rootPath)
		if len(probs) != 0 {
			return probs
		}
		version = v
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return Problems{fmt.Sprintf("%q is not a release version (vX.Y.Z, optionally with a -pre-release suffix)", version)}
	}
	if semver.Major(version) != "v0" && semver.Major(version) != "v1" {
		return Problems{fmt.Sprintf("version %s needs /%s module paths, which the modules do not have", version, semver.Major(version))}
	}

	var released []*mod
	for _, m := range mods {
		if m.Released {
			released = append(released, m)
		}
	}
	logf(cfg, "modcheck: %d modules, %d released, version %s", len(mods), len(released), version)
	if cfg.Tidy {
		return tidy(ctx, cfg, root, mods, released, rootPath, version)
	}

	probs := checkRequires(mods, rootPath, version)
	probs = append(probs, checkNoReplace(mods)...)
	probs = append(probs, checkWorkspace(root, mods, version)...)
	probs = append(probs, checkInternalImports(root, released, rootPath)...)
	graphs, gprobs := readGraphs(root, released, rootPath)
	probs = append(probs, gprobs...)
	if len(probs) != 0 {
		return probs
	}
	logf(cfg, "modcheck: every go.mod requires the repository's modules at %s, with no replace; go.work uses every module; no released code imports %s/internal", version, rootPath)

	tmp, err := os.MkdirTemp("", "modcheck-")
	if err != nil {
		return err
	}
	if cfg.Keep {
		logf(cfg, "modcheck: keeping %s", tmp)
	} else {
		defer removeAll(tmp)
	}

	t := time.Now()
	proxyDir := filepath.Join(tmp, "proxy")
	size, err := buildProxy(proxyDir, root, released, version)
	if err != nil {
		return Problems{err.Error()}
	}
	logf(cfg, "modcheck: proxy of %d modules at %s (%.1f MB of zips) in %s", len(released), version, float64(size)/1e6, since(t))

	env := consumerEnv(os.Environ(), proxyDir, cfg.Upstream, rootPath, filepath.Join(tmp, "modcache"))

	// Every module is tidy as a user's go command sees it.
	t = time.Now()
	tprobs, err := checkTidy(ctx, cfg, root, mods, rootPath, env, filepath.Join(tmp, "tidy"), false)
	if err != nil {
		return err
	}
	if len(tprobs) == 0 {
		logf(cfg, "modcheck: go mod tidy changes no go.mod or go.sum of the %d modules (beside the go.sum lines of the repository's own modules, which are never committed) (%s)", len(mods), since(t))
	}
	probs = append(probs, tprobs...)

	consumerDir := filepath.Join(tmp, "consumer")
	c, err := writeConsumer(consumerDir, root, released, released, rootPath, version)
	if err != nil {
		return err
	}
	// -trimpath keeps the build cache's entries for the dependencies
	// independent of this run's module cache directory, so the next run
	// reuses them.
	type step struct {
		label string
		args  []string
	}
	steps := []step{
		{"go mod tidy", []string{"go", "mod", "tidy"}},
		{"go build ./...", []string{"go", "build", "-trimpath", "-o", os.DevNull, "./..."}},
	}
	if len(c.Commands) != 0 {
		bin := filepath.Join(tmp, "bin") + string(filepath.Separator)
		steps = append(steps, step{"go build tool", []string{"go", "build", "-trimpath", "-o", bin, "tool"}})
	}
	for _, st := range steps {
		t := time.Now()
		out, err := runGo(ctx, consumerDir, env, st.args)
		if cfg.Verbose && len(out) != 0 {
			cfg.Log.Write(out)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			probs = append(probs, fmt.Sprintf("consumer module (%d packages of %d released modules at %s, no replace): `%s` failed: %v\n%s",
				len(c.Imports)+len(c.Commands), len(released), version, st.label, err, strings.TrimRight(string(out), "\n")))
			break
		}
		logf(cfg, "modcheck: consumer: %s ok in %s", st.label, since(t))
	}

	// Every command installs the way a Go user installs one.
	iprobs, err := checkInstall(ctx, cfg, c.Commands, c.CommandModules, version, env, filepath.Join(tmp, "install"))
	if err != nil {
		return err
	}
	probs = append(probs, iprobs...)

	// A consumer of each released module alone has in its module graph
	// only what docs/modules.md says.
	t = time.Now()
	gprobs, err = checkGraphs(ctx, cfg, root, released, graphs, rootPath, version, env, filepath.Join(tmp, "graphs"))
	if err != nil {
		return err
	}
	if len(gprobs) == 0 {
		logf(cfg, "modcheck: the module graph of a consumer of each of the %d released modules alone holds only what %s allows (%s)", len(released), graphsDoc, since(t))
	}
	probs = append(probs, gprobs...)

	if len(probs) != 0 {
		return probs
	}
	logf(cfg, "modcheck: ok: a module outside the repository builds %d packages and %d command(s) of %d released modules at %s (%s)",
		len(c.Imports), len(c.Commands), len(released), version, since(start))
	return nil
}

func logf(cfg config, format string, args ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, format+"\n", args...)
	}
}

func since(t time.Time) string { return time.Since(t).Round(10 * time.Millisecond).String() }

// skipDir reports whether a directory holds no module or package: VCS and
// hidden directories, testdata, and those the go command ignores.
func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// unreleasedTop are the top-level directories whose modules are never
// released (never tagged).
var unreleasedTop = []string{"examples", "bench"}

// isReleased reports whether the module in dir (slash-separated, relative
// to the root) is released.
func isReleased(dir string) bool {
	top, _, _ := strings.Cut(dir, "/")
	for _, u := range unreleasedTop {
		if top == u {
			return false
		}
	}
	return true
}

// findModules returns every module of the tree under root, the root module
// first, then by directory.
func findModules(root string) ([]*mod, error) {
	var mods []*mod
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module directive", p)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		mods = append(mods, &mod{Dir: rel, Path: f.Module.Mod.Path, File: f, Data: data, Released: isReleased(rel)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(mods, func(i, j int) bool {
		if (mods[i].Dir == ".") != (mods[j].Dir == ".") {
			return mods[i].Dir == "."
		}
		return mods[i].Dir < mods[j].Dir
	})
	return mods, nil
}

// ours reports whether a module path belongs to the repository.
func ours(p, rootPath string) bool { return p == rootPath || strings.HasPrefix(p, rootPath+"/") }

// goModName is the go.mod's name in messages.
func goModName(m *mod) string { return path.Join(m.Dir, "go.mod") }

// requiredVersion returns the one version at which the go.mod files
// require the repository's modules, or Problems when they disagree or
// require none.
func requiredVersion(mods []*mod, rootPath string) (string, Problems) {
	seen := map[string][]string{} // version → "go.mod: module"
	for _, m := range mods {
		for _, r := range m.File.Require {
			if ours(r.Mod.Path, rootPath) {
				seen[r.Mod.Version] = append(seen[r.Mod.Version], goModName(m)+" requires "+r.Mod.Path)
			}
		}
	}
	versions := make([]string, 0, len(seen))
	for v := range seen {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	switch {
	case len(versions) == 0:
		return "", Problems{"no go.mod requires a module of the repository: give the version with -version"}
	case len(versions) == 1 && versions[0] != "v0.0.0":
		return versions[0], nil
	}
	var probs Problems
	if len(versions) == 1 {
		probs = Problems{"the go.mod files require the repository's modules at v0.0.0, which is no release: a module outside the repository cannot get them; require the release version (scripts/release.sh sets it):"}
	} else {
		probs = Problems{fmt.Sprintf("the go.mod files do not agree on one release version of the repository's modules (%s):", strings.Join(versions, ", "))}
	}
	for _, v := range versions {
		for _, where := range seen[v] {
			probs = append(probs, fmt.Sprintf("  %s %s%s", where, v, zeroHint(v)))
		}
	}
	return "", probs
}

func zeroHint(v string) string {
	if v == "v0.0.0" {
		return " (v0.0.0 is no release: a module outside the repository cannot get it)"
	}
	return ""
}

// checkRequires finds the go.mod files that require a module of the
// repository at another version than version, or one the tree does not
// release.
func checkRequires(mods []*mod, rootPath, version string) Problems {
	byPath := map[string]*mod{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	var probs Problems
	for _, m := range mods {
		for _, r := range m.File.Require {
			if !ours(r.Mod.Path, rootPath) {
				continue
			}
			where := goModName(m)
			if pos := r.Syntax.Start; pos.Line > 0 {
				where += ":" + strconv.Itoa(pos.Line)
			}
			dep, ok := byPath[r.Mod.Path]
			switch {
			case r.Mod.Version != version:
				probs = append(probs, fmt.Sprintf("%s: requires %s %s, not the release version %s%s", where, r.Mod.Path, r.Mod.Version, version, zeroHint(r.Mod.Version)))
			case !ok:
				probs = append(probs, fmt.Sprintf("%s: requires %s, which is no module of the tree", where, r.Mod.Path))
			case m.Released && !dep.Released:
				probs = append(probs, fmt.Sprintf("%s: released module %s requires %s, which is never released", where, m.Path, r.Mod.Path))
			}
		}
	}
	return probs
}

// checkInternalImports finds the non-test .go files of released modules
// other than the root that import the root module's internal packages.
func checkInternalImports(root string, released []*mod, rootPath string) Problems {
	internal := rootPath + "/internal"
	var probs Problems
	for _, m := range released {
		if m.Dir == "." {
			continue
		}
		dir := filepath.Join(root, filepath.FromSlash(m.Dir))
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != dir && (skipDir(d.Name()) || isFile(filepath.Join(p, "go.mod"))) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				if ip == internal || strings.HasPrefix(ip, internal+"/") {
					rel, _ := filepath.Rel(root, p)
					probs = append(probs, fmt.Sprintf("%s:%d: released module %s imports %s (only its _test.go files may: a released version would depend on the root's unexported code of the same version)",
						filepath.ToSlash(rel), fset.Position(imp.Pos()).Line, m.Path, ip))
				}
			}
			return nil
		})
		if err != nil {
			probs = append(probs, err.Error())
		}
	}
	return probs
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// buildProxy writes a GOPROXY=file:// directory serving every released
// module at version and returns the total size of the zips.
func buildProxy(dir, root string, released []*mod, version string) (int64, error) {
	var total int64
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return 0, err
	}
	for _, m := range released {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", goModName(m), err)
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return 0, err
		}
		files := map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  m.Data,
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return 0, err
			}
		}
		zf, err := os.Create(filepath.Join(vdir, version+".zip"))
		if err != nil {
			return 0, err
		}
		err = createZip(zf, module.Version{Path: m.Path, Version: version}, filepath.Join(root, filepath.FromSlash(m.Dir)))
		if cerr := zf.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("module zip of %s %s: %w", m.Path, version, err)
		}
		if fi, err := os.Stat(zf.Name()); err == nil {
			total += fi.Size()
		}
	}
	return total, nil
}

// createZip writes the module zip of m from dir. In a git work tree it
// leaves out the files git ignores (build outputs such as a compiled test
// binary, which no tagged commit holds); elsewhere it zips the directory as
// it is (zip.CreateFromDir). Either way the zip rules apply: nested modules,
// VCS directories and irregular files are left out, invalid names and
// sizes are errors.
func createZip(w io.Writer, m module.Version, dir string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return modzip.CreateFromDir(w, m, dir)
	}
	var files []modzip.File
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || vcsPath(rel) {
			continue
		}
		files = append(files, zipFile{path: p, slash: rel, info: fi})
	}
	return modzip.Create(w, m, files)
}

// vcsPath reports whether a slash-separated path lies in a VCS directory,
// which zip.CreateFromDir leaves out too.
func vcsPath(rel string) bool {
	for _, e := range strings.Split(rel, "/") {
		switch e {
		case ".bzr", ".git", ".hg", ".svn":
			return true
		}
	}
	return false
}

// zipFile is a file of the work tree for zip.Create.
type zipFile struct {
	path, slash string
	info        fs.FileInfo
}

func (f zipFile) Path() string                 { return f.slash }
func (f zipFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f zipFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

// consumer is the throwaway module that uses the released modules.
type consumer struct {
	Imports        []string        // library packages, blank-imported by its main package
	Commands       []string        // main packages, built as tools
	CommandModules map[string]*mod // the module of each command
}

// writeConsumer writes the consumer module in dir: a go.mod requiring each
// module of uses at version (no replace), with a tool directive per
// command, a main package importing every importable package of them, and
// a go.sum seeded with the released modules' go.sum lines for other
// modules.
func writeConsumer(dir, root string, released, uses []*mod, rootPath, version string) (*consumer, error) {
	c := &consumer{CommandModules: map[string]*mod{}}
	for _, m := range uses {
		pkgs, err := packages(root, m)
		if err != nil {
			return nil, err
		}
		for _, p := range pkgs {
			if isInternal(p.path) {
				continue // neither importable nor buildable from outside
			}
			if p.main {
				c.Commands = append(c.Commands, p.path)
				c.CommandModules[p.path] = m
			} else {
				c.Imports = append(c.Imports, p.path)
			}
		}
	}
	if len(c.Imports)+len(c.Commands) == 0 {
		return nil, errors.New("the released modules have no importable package")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}

	var gomod bytes.Buffer
	goVersion := "1.21"
	if f := released[0].File; f.Go != nil {
		goVersion = f.Go.Version
	}
	fmt.Fprintf(&gomod, "module example.com/modcheck/consumer\n\ngo %s\n\nrequire (\n", goVersion)
	for _, m := range uses {
		fmt.Fprintf(&gomod, "\t%s %s\n", m.Path, version)
	}
	gomod.WriteString(")\n")
	for _, cmd := range c.Commands {
		fmt.Fprintf(&gomod, "\ntool %s\n", cmd)
	}

	var main bytes.Buffer
	main.WriteString("// Command consumer uses every released package, as a module outside the repository does.\npackage main\n\nimport (\n")
	for _, p := range c.Imports {
		fmt.Fprintf(&main, "\t_ %q\n", p)
	}
	main.WriteString(")\n\nfunc main() {}\n")

	sums, err := seedSums(root, released, rootPath)
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"go.mod": gomod.Bytes(), "main.go": main.Bytes(), "go.sum": sums} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// isInternal reports whether an import path has an internal element.
func isInternal(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == "internal" {
			return true
		}
	}
	return false
}

type pkg struct {
	path string
	main bool
}

// packages lists the packages of module m (those with non-test .go files
// for this platform), by import path.
func packages(root string, m *mod) ([]pkg, error) {
	dir := filepath.Join(root, filepath.FromSlash(m.Dir))
	var pkgs []pkg
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != dir && (skipDir(d.Name()) || isFile(filepath.Join(p, "go.mod"))) {
			return filepath.SkipDir
		}
		bp, err := build.Default.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bp.GoFiles)+len(bp.CgoFiles) == 0 {
			return nil // tests only
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		ip := m.Path
		if rel != "." {
			ip += "/" + filepath.ToSlash(rel)
		}
		pkgs = append(pkgs, pkg{path: ip, main: bp.IsCommand()})
		return nil
	})
	return pkgs, err
}

// seedSums returns the released modules' go.sum lines for modules outside
// the repository, deduplicated and sorted.
func seedSums(root string, released []*mod, rootPath string) ([]byte, error) {
	lines := map[string]bool{}
	for _, m := range released {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.sum"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 3 && !ours(f[0], rootPath) {
				lines[strings.Join(f, " ")] = true
			}
		}
	}
	sorted := make([]string, 0, len(lines))
	for l := range lines {
		sorted = append(sorted, l)
	}
	sort.Strings(sorted)
	var b bytes.Buffer
	for _, l := range sorted {
		b.WriteString(l + "\n")
	}
	return b.Bytes(), nil
}

// consumerEnv is the environment of the consumer's go commands: modules of
// the repository from the proxy only and exempt from the checksum
// database, everything else from upstream, no workspace, a module cache of
// its own.
func consumerEnv(base []string, proxyDir, upstream, rootPath, modcache string) []string {
	set := map[string]string{
		"GOWORK":     "off",
		"GOPROXY":    fileURL(proxyDir) + "," + upstream,
		"GONOSUMDB":  rootPath,
		"GONOPROXY":  "none", // a pattern matching nothing: GOPRIVATE must not send our modules past the proxy
		"GOPRIVATE":  "",
		"GOMODCACHE": modcache,
		"GOFLAGS":    "-mod=mod",
	}
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// fileURL is the file:// URL of an absolute directory.
func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}

func runGo(ctx context.Context, dir string, env, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	return cmd.CombinedOutput()
}

// removeAll removes dir, including a module cache's read-only directories.
func removeAll(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(dir)
}
