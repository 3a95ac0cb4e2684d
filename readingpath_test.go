package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The most lines a newcomer reads to follow one review, as README.md's
// "How one review flows" promises: trusting each contract's doc comment,
// and as checked, every declaration of the path read whole and each
// package behind a contract read through. They are ceilings: a fix may
// shorten the path and change neither, and a change that lengthens it
// past one must shorten something else.
const (
	trustingBudget = 360
	checkedBudget  = 1440
)

// TestReadingPath holds README.md's reading path to its promise: its table
// names, file by file, each declaration to read with its doc comment, and
// together they take at most trustingBudget lines, and checkedBudget read
// whole. A declaration marked
// "(contract)" is read only as far as its signature: its doc comment is its
// contract. The test fails when a name is gone or the path outgrows the
// budget, never because a fix changed a count: the table holds none.
func TestReadingPath(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "<!-- reading path -->")
	if !ok {
		t.Fatal("README.md has no <!-- reading path --> table")
	}
	row := regexp.MustCompile("^\\| \\[`([^`]+)`\\]\\([^)]*\\) \\| (.+) \\|$")
	trusting, checked, rows := 0, 0, 0
	checkedPackages := map[string]bool{}
	for line := range strings.Lines(table) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break
			}
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		file, names := m[1], regexp.MustCompile("`([^`]+)`( \\(contract\\))?").FindAllStringSubmatch(m[2], -1)
		// A reader who checks a package's contract reads the package.
		dir, checkPackage := filepath.Dir(file), strings.Contains(m[2], "(contract)")
		if dir == "." {
			checkPackage = false
		}
		for _, n := range names {
			contract, err := declarationLines(file, n[1], n[2] != "")
			if err != nil {
				t.Errorf("README.md's reading path, %s: %v", file, err)
			}
			whole, _ := declarationLines(file, n[1], false)
			trusting += contract
			if !checkPackage {
				checked += whole
			}
		}
		if checkPackage && !checkedPackages[dir] {
			checkedPackages[dir] = true
			checked += packageLines(t, dir)
		}
	}
	if rows == 0 {
		t.Fatal("README.md's reading path lists no file")
	}
	t.Logf("%d files: %d lines trusting the contracts, %d as checked", rows, trusting, checked)
	if trusting > trustingBudget {
		t.Errorf("README.md's reading path takes %d lines trusting the contracts, over the %d it promises: make the path shorter, or a contract of what a reader may skip", trusting, trustingBudget)
	}
	if checked > checkedBudget {
		t.Errorf("README.md's reading path takes %d lines as checked, over the %d it promises", checked, checkedBudget)
	}
}

// declarationLines returns how many lines name takes in file, its doc
// comment included: a function, Type.Method, a type, or a const or var
// (in a group, its own lines and doc comment); with contract, only up to
// the end of its signature or the type's first line.
func declarationLines(file, name string, contract bool) (int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.FromSlash(file), nil, parser.ParseComments)
	if err != nil {
		return 0, err
	}
	span := func(doc *ast.CommentGroup, from, to token.Pos) int {
		if doc != nil {
			from = doc.Pos()
		}
		return fset.Position(to).Line - fset.Position(from).Line + 1
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			full := d.Name.Name
			if d.Recv != nil {
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if generic, ok := recv.(*ast.IndexExpr); ok {
					recv = generic.X
				}
				if ident, ok := recv.(*ast.Ident); ok {
					full = ident.Name + "." + full
				}
			}
			if full != name {
				continue
			}
			if contract {
				return span(d.Doc, d.Pos(), d.Type.End()), nil
			}
			return span(d.Doc, d.Pos(), d.End()), nil
		case *ast.GenDecl:
			for _, s := range d.Specs {
				var ident *ast.Ident
				var doc *ast.CommentGroup
				switch s := s.(type) {
				case *ast.TypeSpec:
					ident, doc = s.Name, s.Doc
				case *ast.ValueSpec:
					ident, doc = s.Names[0], s.Doc
				}
				if ident == nil || ident.Name != name {
					continue
				}
				if len(d.Specs) == 1 && d.Lparen == token.NoPos {
					doc = d.Doc // a declaration of its own
				}
				if contract {
					return span(doc, s.Pos(), s.Pos()), nil
				}
				return span(doc, s.Pos(), s.End()), nil
			}
		}
	}
	return 0, fmt.Errorf("no declaration %s", name)
}

// packageLines counts the lines of dir's Go files, its tests left out.
func packageLines(t *testing.T, dir string) int {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("package %s: %v, %d files", dir, err, len(files))
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), "\n")
	}
	return n
}
