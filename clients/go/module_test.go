package baton_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnAppImportsOnlyThisModule builds the user guide's Go client example
// (examples/clients/golock) as an app of its own that requires this
// module, with the module proxy off: it builds with nothing downloaded,
// and the app's module graph holds the app and this module alone.
func TestAnAppImportsOnlyThisModule(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	app := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "clients", "golock", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	gomod := "module example.com/app\n\ngo 1.26\n\nrequire github.com/baton-dev/baton/clients/go v0.0.0\n\nreplace github.com/baton-dev/baton/clients/go => " + here + "\n"
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "main.go": src} {
		if err := os.WriteFile(filepath.Join(app, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, args...)
		cmd.Dir = app
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("build", "-o", filepath.Join(app, "golock"), ".")
	mods := strings.Split(strings.TrimSpace(goCmd("list", "-m", "all")), "\n")
	if len(mods) != 2 || mods[0] != "example.com/app" || !strings.HasPrefix(mods[1], "github.com/baton-dev/baton/clients/go ") {
		t.Errorf("the app's modules: %q; want the app and github.com/baton-dev/baton/clients/go (replaced) alone", mods)
	}
}
