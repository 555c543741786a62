package style

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// testOnly are the packages that only tests may import: the helpers under
// internal/testing, and the in-memory store.
var testOnly = []string{
	"github.com/baton-dev/baton/internal/testing/",
	"github.com/baton-dev/baton/internal/lockstore/memstore",
}

// TestHelpersStayInTests: no file of the product (a Go file outside
// test/ and internal/testing that is not a test) imports a package that
// only tests may import, so nothing written for tests ships.
func TestHelpersStayInTests(t *testing.T) {
	root := "../.."
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || rel == "test" || rel == filepath.Join("internal", "testing")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, only := range testOnly {
				if strings.HasPrefix(p, only) {
					t.Errorf("%s imports %s, which only tests may import", rel, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: the walk missed the code", checked)
	}
}
