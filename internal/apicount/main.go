// Command apicount counts the exported names of packages: functions,
// types, methods of exported types, constants and variables (struct fields
// and interface methods are part of their type and not counted). It reads
// source only, so it works on any module of the repository:
//
//	go run ./internal/apicount lock store store/memstore ...
//	go run ./internal/apicount -names lock   (lists them)
//
// Directories are relative to the current directory; test files and
// packages named *test are skipped unless given explicitly.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

var listNames = flag.Bool("names", false, "list the names counted")

func main() {
	flag.Parse()
	total := 0
	for _, dir := range flag.Args() {
		n, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%5d  %s\n", n, dir)
		total += n
	}
	fmt.Printf("%5d  total\n", total)
}

func count(dir string) (int, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		return 0, err
	}
	names := make([]string, 0, len(pkgs))
	for name := range pkgs {
		names = append(names, name)
	}
	sort.Strings(names)
	n := 0
	for _, name := range names {
		if name == "main" {
			continue
		}
		files := make([]*ast.File, 0)
		for _, f := range pkgs[name].Files {
			files = append(files, f)
		}
		p, err := doc.NewFromFiles(fset, files, "x")
		if err != nil {
			return 0, err
		}
		n += len(p.Funcs) + values(p.Consts) + values(p.Vars)
		for _, f := range p.Funcs {
			list(dir, f.Name)
		}
		listValues(dir, p.Consts)
		listValues(dir, p.Vars)
		for _, t := range p.Types {
			n += 1 + len(t.Funcs) + len(t.Methods) + values(t.Consts) + values(t.Vars)
			list(dir, t.Name)
			for _, f := range t.Funcs {
				list(dir, f.Name)
			}
			for _, m := range t.Methods {
				list(dir, t.Name+"."+m.Name)
			}
			listValues(dir, t.Consts)
			listValues(dir, t.Vars)
		}
	}
	return n, nil
}

func list(dir, name string) {
	if *listNames {
		fmt.Printf("       %s: %s\n", dir, name)
	}
}

func listValues(dir string, vs []*doc.Value) {
	for _, v := range vs {
		for _, name := range v.Names {
			list(dir, name)
		}
	}
}

func values(vs []*doc.Value) int {
	n := 0
	for _, v := range vs {
		n += len(v.Names)
	}
	return n
}
