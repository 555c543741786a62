package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocsListEveryErrorCode compares the error table of docs/api.md with the
// error codes the server can answer: the Code constants of package
// lockapi. It also checks that the handlers name codes only by those
// constants, so that the list is the whole truth.
func TestDocsListEveryErrorCode(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	contract, err := filepath.Glob("../../clients/go/lockapi/*.go") // the Code constants
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, contract...)
	var codes []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if strings.HasPrefix(name.Name, "Code") && i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok {
							v, _ := strconv.Unquote(lit.Value)
							codes = append(codes, v)
						}
					}
				}
			case *ast.CallExpr: // badRequest("literal", ...)
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "badRequest" {
					if _, lit := n.Args[0].(*ast.BasicLit); lit {
						t.Errorf("%s: badRequest with a literal code; use a Code constant", fset.Position(n.Pos()))
					}
				}
			case *ast.KeyValueExpr: // apiError{code: "literal"}
				if id, ok := n.Key.(*ast.Ident); ok && id.Name == "code" {
					if _, lit := n.Value.(*ast.BasicLit); lit {
						t.Errorf("%s: an error code literal; use a Code constant", fset.Position(n.Pos()))
					}
				}
			}
			return true
		})
	}
	if len(codes) < 15 {
		t.Fatalf("found only %d Code constants: %v", len(codes), codes)
	}

	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| status | code | when |")
	if !ok {
		t.Fatal("docs/api.md has no error table (| status | code | when |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	// The code column of each row: | 409 | `already_running` | ...
	var listed []string
	for _, row := range regexp.MustCompile(`(?m)^\| \d{3} \| (.+?) \|`).FindAllStringSubmatch(table, -1) {
		for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row[1], -1) {
			listed = append(listed, c[1])
		}
	}
	for _, c := range codes {
		if !slices.Contains(listed, c) {
			t.Errorf("error code %q is missing from the error table of docs/api.md", c)
		}
	}
	for _, l := range listed {
		if !slices.Contains(codes, l) {
			t.Errorf("the error table of docs/api.md lists %q, which the server never answers", l)
		}
	}
}
