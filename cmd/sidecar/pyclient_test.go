package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// TestPythonClient installs the Python client as docs/python.md shows,
// with pip in a fresh virtual environment and no package index (its build
// backend is beside it, the standard library only), then runs its tests
// (clients/python/tests) against two sidecars on etcd, with a hook that
// revokes a lock holder's etcd lease for the loss mid-hold, and the page's
// example, which the page shows as it is.
func TestPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to test the Python client: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "python.md"))
	if err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(python, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	env := append(os.Environ(), "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"), "VIRTUAL_ENV="+venv,
		"PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONDONTWRITEBYTECODE=1")
	sh := func(dir, line string, extra ...string) string {
		t.Helper()
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir, cmd.Env = dir, append(env, extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}
	const install = "$ pip install ./clients/python\n"
	if !strings.Contains(string(page), install) {
		t.Fatalf("docs/python.md does not show %q", install)
	}
	sh(root, strings.TrimPrefix(strings.TrimSpace(install), "$ "))

	pythonInStep(t, root)

	const scope = "pyclient"
	pa, pb := twoSidecars(t, scope)
	cli, _ := testEtcd.Client(t)
	revoker := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		revokeHolderLease(t, cli, scope, r.URL.Query().Get("key"))
	}))
	defer revoker.Close()
	out := sh(t.TempDir(), "python3 -m unittest discover -v -s "+filepath.Join(root, "clients", "python", "tests"),
		"BATON_SOCKET_A="+pa.socket, "BATON_SOCKET_B="+pb.socket, "BATON_TEST_REVOKE="+revoker.URL)
	t.Logf("the Python client's tests:\n%s", out)

	example := filepath.Join(root, "examples", "clients", "python", "resume.py")
	src, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), string(src)) {
		t.Errorf("docs/python.md does not show examples/clients/python/resume.py as it is")
	}
	got := sh(t.TempDir(), "python3 "+example, "BATON_SOCKET="+pa.socket)
	if strings.Count(got, "\n200 ") != 1 || strings.Count(got, "\n409 ") != 2 || !strings.Contains(got, `"running_execution_id":"exec-`) {
		t.Errorf("the page's example printed:\n%s\nwant one 200 and two 409 naming the running execution", got)
	}
	replicasTakeTurns(t, "python/lead.py", scope, [2]string{pa.socket, pb.socket}, func(socket, address string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(venv, "bin", "python3"), filepath.Join(root, "examples", "clients", "python", "lead.py"))
		cmd.Env = append(env, "BATON_SOCKET="+socket, "ADDRESS="+address, "PYTHONUNBUFFERED=1")
		return cmd
	})
}

// pythonInStep checks that the Python client keeps in step with Baton: its
// version is the chart's appVersion, and every error code it names is one
// of the API's (clients/go/lockapi), except the two reasons of a loss that
// only a client sees, and its claim's fields are the request's.
func pythonInStep(t *testing.T, root string) {
	t.Helper()
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	py := regexp.MustCompile(`(?m)^version = "([^"]+)"$`).FindStringSubmatch(read("clients/python/pyproject.toml"))
	if app := chartAppVersion(t, root); py == nil || py[1] != app {
		t.Errorf("clients/python/pyproject.toml's version %v, the chart's appVersion %q: want the same", py, app)
	}
	codes := map[string]bool{}
	for _, m := range regexp.MustCompile(`Code\w+\s*=\s*"(\w+)"`).FindAllStringSubmatch(read("clients/go/lockapi/codes.go"), -1) {
		codes[m[1]] = true
	}
	named := regexp.MustCompile(`(?m)^([A-Z_]+) = "(\w+)"$`).FindAllStringSubmatch(read("clients/python/baton_client/errors.py"), -1)
	if len(named) < 5 || len(codes) < 15 {
		t.Fatalf("found %d codes in the Python client and %d in lockapi", len(named), len(codes))
	}
	for _, m := range named {
		if !codes[m[2]] && m[1] != "STREAM_ENDED" && m[1] != "SILENT" {
			t.Errorf("the Python client's %s = %q is not an error code of the API", m[1], m[2])
		}
	}
	// The claim's fields are the request's, as the OpenAPI document has them.
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(lockapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)body = \{(.*?)\}`).FindStringSubmatch(read("clients/python/baton_client/_wire.py"))
	if body == nil {
		t.Fatal("no claim body in clients/python/baton_client/_wire.py")
	}
	var fields []string
	for _, m := range regexp.MustCompile(`"(\w+)":`).FindAllStringSubmatch(body[1], -1) {
		fields = append(fields, m[1])
	}
	want := slices.Sorted(maps.Keys(doc.Components.Schemas["Request"].Properties))
	if slices.Sort(fields); !slices.Equal(fields, want) {
		t.Errorf("the Python client's claim has the fields %v, the API's request %v", fields, want)
	}
}
