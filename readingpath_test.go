package main

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The most lines a newcomer reads to follow one review, as README.md's
// "How one review flows" promises. They are ceilings: a fix may shorten
// the path and change neither, and a change that lengthens it past one
// must shorten something else.
const (
	// Trusting the contracts: each declaration README.md's table lists,
	// read whole, or to the end of its signature where it is marked
	// "(contract)"; and of every other declaration of this module that
	// the whole ones use, its doc comment and signature, as a reader who
	// meets a name reads what it promises.
	trustingBudget = 300

	// As checked: every declaration of this module reachable from the
	// table's, read whole, a contract type's methods with it, and of every
	// other type the methods the standard library calls (implicitMethods).
	checkedBudget = 1604
)

// policyFile is the copier's: the path ends at the policy's admit
// function, whatever the policy is (README.md: "then the policy's admit
// function").
const policyFile = "policy.go"

// TestReadingPath holds README.md's reading path to its promise. Its table
// names, file by file, where a reader starts; the test follows, through
// the type checker, every declaration of this module that the path's code
// uses, so that nothing a reader must meet can be left out of the count.
// It fails when a name in the table is gone or the path outgrows a
// ceiling, never because a fix changed a count: the table holds none.
func TestReadingPath(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readingPathTable(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	m := newModuleIndex(t)
	listed, contract := map[*declaration]bool{}, map[*declaration]bool{}
	var start []*declaration
	for _, e := range entries {
		d := m.lookup(filepath.Dir(e.file), e.name)
		if d == nil || d.file != filepath.FromSlash(e.file) {
			t.Errorf("README.md's reading path, %s: no declaration %s", e.file, e.name)
			continue
		}
		listed[d], contract[d] = true, e.contract
		start = append(start, d)
	}

	trusting, met := 0, map[*declaration]bool{}
	for _, d := range start {
		if contract[d] {
			trusting += d.signature
			continue
		}
		trusting += d.whole
		for _, used := range m.uses(d) {
			if !listed[used] && !met[used] {
				met[used] = true
				trusting += used.signature
			}
		}
	}

	checked, byDir := 0, map[string]int{}
	seen, queue := map[*declaration]bool{}, slices.Clone(start)
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		checked += d.whole
		byDir[d.dir] += d.whole
		switch {
		case d.isType && contract[d]:
			queue = append(queue, m.methods(d)...)
		case d.isType:
			queue = append(queue, m.implicitMethods(d)...)
		default:
			queue = append(queue, m.uses(d)...)
		}
	}

	t.Logf("%d declarations listed: %d lines trusting the contracts; %d as checked, by folder %v", len(start), trusting, checked, byDir)
	largest := slices.SortedFunc(maps.Keys(seen), func(a, b *declaration) int { return b.whole - a.whole })
	for _, d := range largest[:min(len(largest), 12)] {
		t.Logf("  %4d  %s %s", d.whole, d.file, d.name)
	}
	if trusting > trustingBudget {
		t.Errorf("README.md's reading path takes %d lines trusting the contracts, over the %d it promises: make the path shorter, or a contract of what a reader may skip", trusting, trustingBudget)
	}
	if checked > checkedBudget {
		t.Errorf("README.md's reading path takes %d lines as checked, over the %d it promises", checked, checkedBudget)
	}
}

type pathEntry struct {
	file, name string
	contract   bool
}

// readingPathTable reads the table after README.md's <!-- reading path -->.
func readingPathTable(readme string) ([]pathEntry, error) {
	_, table, ok := strings.Cut(readme, "<!-- reading path -->")
	if !ok {
		return nil, fmt.Errorf("README.md has no <!-- reading path --> table")
	}
	row := regexp.MustCompile("^\\| \\[`([^`]+)`\\]\\([^)]*\\) \\| (.+) \\|$")
	name := regexp.MustCompile("`([^`]+)`( \\(contract\\))?")
	var entries []pathEntry
	rows := 0
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
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			entries = append(entries, pathEntry{file: m[1], name: n[1], contract: n[2] != ""})
		}
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("README.md's reading path lists no declaration")
	}
	return entries, nil
}

// A declaration is a function, Type.Method, type, or const or var (in a
// group, its own lines and doc comment) of this module, and the lines it
// takes with its doc comment: whole, and up to the end of its signature
// (a type's or value's first line).
type declaration struct {
	dir, file, name  string
	whole, signature int
	isType           bool
	node             ast.Node
	object           types.Object // the first name it declares
}

// moduleIndex is this module's packages, type-checked from source, with
// the standard library's types, so that this module's generic types
// instantiated with them resolve; every other package is an empty
// stand-in, as only this module's declarations are counted.
type moduleIndex struct {
	t        *testing.T
	module   string
	fset     *token.FileSet
	info     *types.Info
	checked  map[string]*types.Package // by folder
	imported map[string]*types.Package // other modules' stand-ins and the standard library's, by import path
	std      types.Importer
	decls    map[types.Object]*declaration
	named    map[string]*declaration // dir:name
}

func newModuleIndex(t *testing.T) *moduleIndex {
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(gomod), "\n")
	m := &moduleIndex{t: t, module: strings.TrimSpace(strings.TrimPrefix(first, "module")), fset: token.NewFileSet(),
		info:    &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}},
		checked: map[string]*types.Package{}, imported: map[string]*types.Package{}, decls: map[types.Object]*declaration{},
		named: map[string]*declaration{}, std: importer.Default()}
	m.check(".")
	return m
}

func (m *moduleIndex) lookup(dir, name string) *declaration {
	if dir != "." {
		m.check(dir)
	}
	return m.named[dir+":"+name]
}

// Import is the type checker's importer: this module's packages are
// checked from source, the standard library's come from the go command's
// export data, and any other is an empty stand-in, whose uses the checker
// leaves unresolved (its errors are ignored).
func (m *moduleIndex) Import(importPath string) (*types.Package, error) {
	if dir, ok := strings.CutPrefix(importPath, m.module+"/"); ok {
		if p := m.check(dir); p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("import cycle through %s", importPath)
	}
	if p, ok := m.imported[importPath]; ok {
		return p, nil
	}
	if first, _, _ := strings.Cut(importPath, "/"); !strings.Contains(first, ".") {
		if p, err := m.std.Import(importPath); err == nil {
			m.imported[importPath] = p
			return p, nil
		}
	}
	p := types.NewPackage(importPath, path.Base(importPath))
	p.MarkComplete()
	m.imported[importPath] = p
	return p, nil
}

func (m *moduleIndex) check(dir string) *types.Package {
	if p, ok := m.checked[dir]; ok {
		return p
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		m.t.Fatalf("package %s: %v, %d files", dir, err, len(names))
	}
	var files []*ast.File
	for _, name := range names {
		if match, err := build.Default.MatchFile(filepath.Dir(name), filepath.Base(name)); strings.HasSuffix(name, "_test.go") || err != nil || !match {
			continue // a test, or a file of another system's (certs/owner_other.go)
		}
		f, err := parser.ParseFile(m.fset, name, nil, parser.ParseComments)
		if err != nil {
			m.t.Fatal(err)
		}
		files = append(files, f)
	}
	importPath := m.module
	if dir != "." {
		importPath += "/" + filepath.ToSlash(dir)
	}
	m.checked[dir] = nil // a cycle cannot compile; stop here should one be met
	conf := types.Config{Importer: m, Error: func(error) {}}
	p, _ := conf.Check(importPath, m.fset, files, m.info)
	m.checked[dir] = p
	for _, f := range files {
		m.index(dir, f)
	}
	return p
}

// index records f's declarations.
func (m *moduleIndex) index(dir string, f *ast.File) {
	file := m.fset.Position(f.Pos()).Filename
	if dir == "." && filepath.Base(file) == policyFile {
		return
	}
	lines := func(doc *ast.CommentGroup, from, to token.Pos) int {
		if doc != nil {
			from = doc.Pos()
		}
		return m.fset.Position(to).Line - m.fset.Position(from).Line + 1
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			d := &declaration{dir: dir, file: file, name: decl.Name.Name, node: decl,
				whole: lines(decl.Doc, decl.Pos(), decl.End()), signature: lines(decl.Doc, decl.Pos(), decl.Type.End())}
			if decl.Recv != nil {
				d.name = receiverName(decl.Recv.List[0].Type) + "." + d.name
			}
			m.add(d, decl.Name)
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				var idents []*ast.Ident
				var doc *ast.CommentGroup
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					idents, doc = []*ast.Ident{spec.Name}, spec.Doc
				case *ast.ValueSpec:
					idents, doc = spec.Names, spec.Doc
				default:
					continue
				}
				if len(decl.Specs) == 1 && decl.Lparen == token.NoPos {
					doc = decl.Doc // a declaration of its own
				}
				_, isType := spec.(*ast.TypeSpec)
				d := &declaration{dir: dir, file: file, name: idents[0].Name, node: spec, isType: isType,
					whole: lines(doc, spec.Pos(), spec.End()), signature: lines(doc, spec.Pos(), spec.Pos())}
				m.add(d, idents...)
			}
		}
	}
}

func (m *moduleIndex) add(d *declaration, idents ...*ast.Ident) {
	d.object = m.info.Defs[idents[0]]
	for _, id := range idents {
		m.decls[m.info.Defs[id]] = d
		name := id.Name
		if len(idents) == 1 {
			name = d.name // Type.Method
		}
		m.named[d.dir+":"+name] = d
	}
}

// methods returns the methods of d, a type, as the type checker found them.
func (m *moduleIndex) methods(d *declaration) []*declaration {
	named, ok := d.object.Type().(*types.Named)
	if !ok {
		return nil
	}
	var methods []*declaration
	for i := range named.NumMethods() {
		if method := m.decls[named.Method(i)]; method != nil {
			methods = append(methods, method)
		}
	}
	return methods
}

// implicitMethods returns the methods of d, a type, that the standard
// library calls through an interface, where no name in this module's code
// leads to them: Error, String, LogValue and Unwrap.
func (m *moduleIndex) implicitMethods(d *declaration) []*declaration {
	var methods []*declaration
	for _, method := range m.methods(d) {
		switch method.object.Name() {
		case "Error", "String", "LogValue", "Unwrap":
			methods = append(methods, method)
		}
	}
	return methods
}

func receiverName(recv ast.Expr) string {
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	switch generic := recv.(type) {
	case *ast.IndexExpr:
		recv = generic.X
	case *ast.IndexListExpr:
		recv = generic.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return id.Name
	}
	return fmt.Sprint(recv)
}

// uses returns the declarations of this module that d's code names: the
// functions and methods it calls, and the types, constants and variables
// it uses; not struct fields, which are read with their type.
func (m *moduleIndex) uses(d *declaration) []*declaration {
	var used []*declaration
	ast.Inspect(d.node, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		obj := m.info.Uses[id]
		if obj == nil {
			return true // unresolved: of another module's stand-in
		}
		switch o := obj.(type) {
		case *types.Func:
			obj = o.Origin()
		case *types.Var:
			obj = o.Origin()
		}
		if u := m.decls[obj]; u != nil && u != d {
			used = append(used, u)
		}
		return true
	})
	return used
}
