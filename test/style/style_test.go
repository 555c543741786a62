// Package style checks the house rules of the code that CI can check:
// small files and small functions, so that each file holds one concept a
// reader takes in at once.
package style

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	maxFileLines = 400
	maxFuncLines = 80
)

// TestFileAndFunctionSizes: no Go file other than a test is over
// maxFileLines lines, and no function or function literal in one is over
// maxFuncLines.
func TestFileAndFunctionSizes(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := productFiles(func(path, rel string) error {
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := strings.Count(string(src), "\n"); n > maxFileLines {
			t.Errorf("%s has %d lines; at most %d: split it by concept", rel, n, maxFileLines)
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch fn := n.(type) {
			case *ast.FuncDecl:
				body, name = fn.Body, fn.Name.Name
			case *ast.FuncLit:
				body = fn.Body
			}
			if body == nil {
				return true
			}
			if lines := fset.Position(body.End()).Line - fset.Position(body.Pos()).Line - 1; lines > maxFuncLines {
				t.Errorf("%s:%d: %s has %d lines; at most %d", rel, fset.Position(body.Pos()).Line, name, lines, maxFuncLines)
			}
			return true
		})
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files: the walk missed the code", checked)
	}
}

// root is the repository, from this directory.
const root = "../.."

// productFiles calls f with each Go file of the repository that is not a
// test (its path, and its path from the repository's root), skipping
// hidden directories, bin, testdata, and the directories whose path from
// the root is one of skip.
func productFiles(f func(path, rel string) error, skip ...string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || slices.Contains(skip, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return f(path, rel)
	})
}
