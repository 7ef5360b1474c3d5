// Package apirecord lists a package's exported API, one declaration a
// line, sorted, as Go itself keeps api/go1.*.txt: each module's test
// compares its packages' API with a record file in the repository, so an
// API change fails the tests until the record is regenerated (go test
// -run TestAPI -update-api), and shows up in review beside CHANGELOG.md.
//
// It reads the source, not the compiled package: a declaration is listed
// as written (parameter names left out), which is what a reviewer reads.
// Values of constants and the types of variables declared without one are
// not listed.
package apirecord

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Lines returns the exported API of the package in dir (its Go files for
// the default build context, tests left out), one line per exported
// declaration, field and method, sorted.
func Lines(dir string) ([]string, error) {
	pkg, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var lines []string
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		l := lister{fset: fset, pkg: pkg.Name}
		for _, d := range f.Decls {
			l.decl(d)
		}
		lines = append(lines, l.lines...)
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// lister collects the lines of one file.
type lister struct {
	fset  *token.FileSet
	pkg   string
	lines []string
}

func (l *lister) add(format string, args ...any) {
	l.lines = append(l.lines, "pkg "+l.pkg+", "+fmt.Sprintf(format, args...))
}

// expr prints an expression as written.
func (l *lister) expr(e ast.Expr) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, l.fset, e)
	return b.String()
}

func (l *lister) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		l.funcDecl(d)
	case *ast.GenDecl:
		var last ast.Expr // a const block's type carries to the lines after it
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				l.typeSpec(s)
			case *ast.ValueSpec:
				if s.Type != nil || len(s.Values) > 0 {
					last = s.Type
				}
				l.valueSpec(d.Tok, s, last)
			}
		}
	}
}

func (l *lister) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	if d.Recv == nil {
		l.add("func %s%s", d.Name.Name, l.signature(d.Type))
		return
	}
	recv := d.Recv.List[0].Type
	base := recv
	if s, ok := base.(*ast.StarExpr); ok {
		base = s.X
	}
	if ix, ok := base.(*ast.IndexExpr); ok {
		base = ix.X
	}
	if id, ok := base.(*ast.Ident); !ok || !id.IsExported() {
		return
	}
	l.add("method (%s) %s%s", l.expr(recv), d.Name.Name, l.signature(d.Type))
}

// signature prints a function type's parameters and results without
// their names.
func (l *lister) signature(t *ast.FuncType) string {
	s := "(" + l.types(t.Params) + ")"
	if t.Results == nil {
		return s
	}
	res := l.types(t.Results)
	if len(t.Results.List) == 1 && len(t.Results.List[0].Names) <= 1 {
		return s + " " + res
	}
	return s + " (" + res + ")"
}

// types prints a field list's types, one per name.
func (l *lister) types(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var ts []string
	for _, f := range fl.List {
		for range max(len(f.Names), 1) {
			ts = append(ts, l.expr(f.Type))
		}
	}
	return strings.Join(ts, ", ")
}

func (l *lister) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	switch t := s.Type.(type) {
	case *ast.StructType:
		l.add("type %s struct", name)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if ast.IsExported(embeddedName(f.Type)) {
					l.add("type %s struct, embedded %s", name, l.expr(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					l.add("type %s struct, %s %s", name, n.Name, l.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		l.add("type %s interface", name)
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if ft, ok := m.Type.(*ast.FuncType); ok && n.IsExported() {
					l.add("type %s interface, %s%s", name, n.Name, l.signature(ft))
				}
			}
			if len(m.Names) == 0 {
				l.add("type %s interface, embedded %s", name, l.expr(m.Type))
			}
		}
	default:
		op := " "
		if s.Assign.IsValid() {
			op = " = "
		}
		l.add("type %s%s%s", name, op, l.expr(s.Type))
	}
}

// embeddedName is the name an embedded field is known by.
func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func (l *lister) valueSpec(tok token.Token, s *ast.ValueSpec, typ ast.Expr) {
	for _, n := range s.Names {
		if !n.IsExported() {
			continue
		}
		if typ != nil {
			l.add("%s %s %s", tok, n.Name, l.expr(typ))
		} else {
			l.add("%s %s", tok, n.Name)
		}
	}
}

// header opens every record file.
const header = "# The exported API, generated from the source: go test -run TestAPI -update-api\n"

// Check compares the API of the package in dir with the record file: what
// the record lacks (added to the API) and what the API lacks (removed).
func Check(dir, record string) (added, removed []string, err error) {
	got, err := Lines(dir)
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(record)
	if err != nil {
		return nil, nil, err
	}
	var want []string
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			added = append(added, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			removed = append(removed, w)
		}
	}
	return added, removed, nil
}

// Write writes the record file of the package in dir.
func Write(dir, record string) error {
	lines, err := Lines(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(record, []byte(header+strings.Join(lines, "\n")+"\n"), 0o644)
}

// Test fails t when the API of the package in dir differs from record,
// naming what was added and removed, or rewrites record when update is
// set. Each module's TestAPI calls it.
func Test(t testing.TB, dir, record string, update bool) {
	t.Helper()
	if update {
		if err := Write(dir, record); err != nil {
			t.Fatal(err)
		}
		return
	}
	added, removed, err := Check(dir, record)
	if err != nil {
		t.Fatal(err)
	}
	if len(added)+len(removed) > 0 {
		t.Fatalf("the exported API differs from %s; if on purpose, run go test -run TestAPI -update-api and say why in CHANGELOG.md\nadded:%s\nremoved:%s",
			record, listed(added), listed(removed))
	}
}

// listed is lines, one per line and indented, or " none".
func listed(lines []string) string {
	if len(lines) == 0 {
		return " none"
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}
