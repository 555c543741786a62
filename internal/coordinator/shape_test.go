package coordinator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The shape of the engine, as rules a test keeps (docs/design.md): no
// type with more than maxMethods methods, no store interface with more
// than maxStoreMethods. A type that must stay above the first for a while
// is listed in overweight with the count it had, which it may lower and
// never raise.
const (
	maxMethods      = 40
	maxStoreMethods = 8
)

// overweight are the engine's types above maxMethods, and their ceilings:
// none since the coordinator became a registry of lines (128 methods
// then, 40 now).
var overweight = map[string]int{}

// enginePackages are the engine's packages, from this directory.
var enginePackages = []string{".", "../lockstore", "../lockstore/etcdstore", "../lockstore/memstore", "../keyspace", "../engine"}

// TestMethodsPerType: no type of the engine has more than maxMethods
// methods, but those in overweight, which have no more than they had.
func TestMethodsPerType(t *testing.T) {
	parallel(t)
	counted := 0
	seen := map[string]bool{}
	for _, dir := range enginePackages {
		for name, n := range methodsPerType(t, dir) {
			counted++
			seen[name] = true
			limit, over := overweight[name]
			if !over {
				limit = maxMethods
			}
			if n > limit {
				t.Errorf("%s has %d methods; at most %d: cut it by responsibility", name, n, limit)
			}
			if over && n <= maxMethods {
				t.Errorf("%s is down to %d methods: take it off the overweight list", name, n)
			}
		}
	}
	if counted < 20 {
		t.Fatalf("counted the methods of %d types: the walk missed the code", counted)
	}
	for name := range overweight {
		if !seen[name] {
			t.Errorf("%s is on the overweight list but was not found: renamed or gone? Take it off the list", name)
		}
	}
}

// productFiles parses the non-test Go files of dir.
func productFiles(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// methodsPerType counts the methods of each type declared in dir's
// non-test files, by "package.Type".
func methodsPerType(t *testing.T, dir string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	_, files := productFiles(t, dir)
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			typ := fd.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if ix, ok := typ.(*ast.IndexExpr); ok {
				typ = ix.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				counts[f.Name.Name+"."+id.Name]++
			}
		}
	}
	return counts
}

// TestLockedNeverUnlocks: a function named *Locked is called with its
// mutex held and returns with it held; it neither takes nor lets go a
// mutex (a goroutine it starts may). A function that must wait takes the
// lock itself, so that who holds it is read in one place.
func TestLockedNeverUnlocks(t *testing.T) {
	parallel(t)
	locked := 0
	for _, dir := range enginePackages {
		fset, files := productFiles(t, dir)
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil || !strings.HasSuffix(fd.Name.Name, "Locked") {
					continue
				}
				locked++
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if _, ok := n.(*ast.FuncLit); ok {
						return false
					}
					if sel, ok := n.(*ast.SelectorExpr); ok {
						switch sel.Sel.Name {
						case "Lock", "Unlock", "RLock", "RUnlock":
							t.Errorf("%s: %s calls %s: a *Locked function returns with the lock it was given, and takes no other", fset.Position(sel.Pos()), fd.Name.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	if locked < 20 {
		t.Fatalf("found %d *Locked functions: the walk missed the code", locked)
	}
}

// TestStoreInterfacesAreSmall: every interface of the storage seam has at
// most maxStoreMethods methods, those of the interfaces it embeds
// included, but Store, which is only their union: what a backend
// implements, never what a part of the engine holds. Nothing in the
// coordinator holds a lockstore.Store but New, which cuts it (storesOf).
func TestStoreInterfacesAreSmall(t *testing.T) {
	parallel(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../lockstore/lockstore.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ifaces := map[string]*ast.InterfaceType{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				ifaces[ts.Name.Name] = it
			}
		}
		return true
	})
	var methods func(name string) int
	methods = func(name string) int {
		n := 0
		for _, m := range ifaces[name].Methods.List {
			if id, ok := m.Type.(*ast.Ident); ok && len(m.Names) == 0 {
				n += methods(id.Name) // embedded
				continue
			}
			n += len(m.Names)
		}
		return n
	}
	if len(ifaces) < 5 {
		t.Fatalf("found %d interfaces in lockstore.go: the parse missed them", len(ifaces))
	}
	for name, it := range ifaces {
		if name == "Store" {
			for _, m := range it.Methods.List {
				if len(m.Names) > 0 {
					t.Errorf("lockstore.Store declares %s: it is only the union of the small interfaces; put it in the one its user holds", m.Names[0].Name)
				}
			}
			continue
		}
		if n := methods(name); n > maxStoreMethods {
			t.Errorf("lockstore.%s has %d methods; at most %d: cut it by who uses it", name, n, maxStoreMethods)
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(src, func(n ast.Node) bool {
			fd, ok := n.(*ast.FuncDecl)
			if ok && (fd.Name.Name == "New" || fd.Name.Name == "storesOf") && fd.Recv == nil {
				return false
			}
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "lockstore" && sel.Sel.Name == "Store" {
					t.Errorf("%s: holds a lockstore.Store; hold the small interface it uses", fset.Position(sel.Pos()))
				}
			}
			return true
		})
	}
}
