//go:build ignore

// sizes checks the standing size rules (docs/testing.md): no Go file over
// 400 lines, and no function outside a test file over 60. It reads every
// .go file under the current directory (but .git, .bin and testdata) and
// exits 1, listing what is over, if any is.
//
//	go run .ci/sizes.go
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const (
	maxFileLines = 400
	maxFuncLines = 60
)

func main() {
	var over []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".bin", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			over = append(over, fmt.Sprintf("file %s: %d lines (limit %d)", path, n, maxFileLines))
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			if n := end - start + 1; n > maxFuncLines {
				over = append(over, fmt.Sprintf("func %s:%d %s: %d lines (limit %d)", path, start, fn.Name.Name, n, maxFuncLines))
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizes:", err)
		os.Exit(2)
	}
	for _, o := range over {
		fmt.Println(o)
	}
	if len(over) > 0 {
		os.Exit(1)
	}
}
