package style

import (
	"go/parser"
	"go/token"
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
	fset := token.NewFileSet()
	checked := 0
	err := productFiles(func(path, rel string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
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
	}, "test", filepath.Join("internal", "testing"))
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: the walk missed the code", checked)
	}
}
