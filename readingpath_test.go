package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestReadingPath holds README.md's count of what a newcomer reads to
// follow one review to the number a reader would get: its table of the
// reading path names, file by file, each declaration to read with its doc
// comment, and the lines they take. A declaration marked "(contract)" is
// read only as far as its signature: its doc comment is its contract. The
// test fails when a name is gone, or a count is not the code's.
func TestReadingPath(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "<!-- reading path -->")
	if !ok {
		t.Fatal("README.md has no <!-- reading path --> table")
	}
	row := regexp.MustCompile("^\\| \\[`([^`]+)`\\]\\([^)]*\\) \\| (.+) \\| (\\d+) \\|$")
	total, sum, rows := 0, 0, 0
	for line := range strings.Lines(table) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break
			}
			continue
		}
		if m := regexp.MustCompile(`^\| in all \| (\d+) files \| (\d+) \|$`).FindStringSubmatch(line); m != nil {
			total, _ = strconv.Atoi(m[2])
			if files, _ := strconv.Atoi(m[1]); files != rows {
				t.Errorf("README.md's reading path says %d files, and lists %d", files, rows)
			}
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		file, names := m[1], regexp.MustCompile("`([^`]+)`( \\(contract\\))?").FindAllStringSubmatch(m[2], -1)
		want, _ := strconv.Atoi(m[3])
		got := 0
		for _, n := range names {
			lines, err := declarationLines(file, n[1], n[2] != "")
			if err != nil {
				t.Errorf("README.md's reading path, %s: %v", file, err)
			}
			got += lines
		}
		if got != want {
			t.Errorf("README.md's reading path, %s: says %d lines, and they are %d", file, want, got)
		}
		sum += got
	}
	if rows == 0 || total != sum {
		t.Errorf("README.md's reading path: %d files, in all %d lines, and they are %d", rows, total, sum)
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
