package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLeanBuild: the lean build, what every pod's sidecar runs, carries
// neither the Kubernetes libraries nor etcd's server; asked for the
// embedded etcd or the controller it says what to do instead; on an
// external etcd it grants, as bin/baton does.
func TestLeanBuild(t *testing.T) {
	deps := func(flags ...string) []string {
		out, err := exec.Command("go", append(append([]string{"list", "-deps"}, flags...), ".")...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", flags, err)
		}
		return strings.Fields(string(out))
	}
	heavy := []string{"k8s.io/", "sigs.k8s.io/", "go.etcd.io/etcd/server/", "go.etcd.io/bbolt", "go.etcd.io/raft/",
		"github.com/baton-dev/baton/internal/embedetcd", "github.com/baton-dev/baton/internal/controller",
		"github.com/baton-dev/baton/internal/webhook", "github.com/baton-dev/baton/internal/mirror"}
	carries := func(pkgs []string) (found []string) {
		for _, p := range pkgs {
			for _, h := range heavy {
				if strings.HasPrefix(p, h) {
					found = append(found, p)
					break
				}
			}
		}
		return found
	}
	if found := carries(deps("-tags", "lean")); len(found) > 0 {
		t.Errorf("the lean build imports %d packages it should not, such as %v", len(found), found[:min(5, len(found))])
	}
	if found := carries(deps()); len(found) == 0 {
		t.Error("the full build imports neither Kubernetes nor etcd's server: this check looks for the wrong names")
	}
	// Dapr's API is in baton-dapr (lean,dapr), the sidecar of the pods that
	// speak Dapr, and in the full build; not in the lean one.
	daprPkg := "github.com/baton-dev/baton/internal/dapr"
	lean, withDapr := deps("-tags", "lean"), deps("-tags", "lean,dapr")
	if slices.ContainsFunc(lean, func(p string) bool { return p == daprPkg || strings.HasPrefix(p, "github.com/dapr/") }) {
		t.Error("the lean build carries Dapr's API")
	}
	if !slices.Contains(withDapr, daprPkg) || !slices.Contains(deps(), daprPkg) {
		t.Error("baton-dapr (lean,dapr) or the full build lacks Dapr's API")
	}
	if found := carries(withDapr); len(found) > 0 {
		t.Errorf("baton-dapr imports %d packages it should not, such as %v", len(found), found[:min(5, len(found))])
	}

	bin := leanBinary(t)
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--socket", filepath.Join(dir, "x.sock")}, "--etcd-endpoints: required by this lean build of baton, which has no embedded etcd"},
		{[]string{"mirror"}, `unknown command "mirror"`},
		{[]string{"serve", "--socket", filepath.Join(dir, "x.sock"), "--etcd-endpoints", "http://127.0.0.1:1", "--dapr-http-addr", "127.0.0.1:3500"}, "this lean build of baton has no Dapr API; baton-dapr"},
	} {
		out, err := exec.Command(bin, tt.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
			t.Errorf("baton-sidecar %s: %v %q; want exit 2 and %q", strings.Join(tt.args, " "), err, out, tt.want)
		}
	}

	p := startBinary(t, bin, filepath.Join(dir, "a.sock"), "lean-test")
	if code := post(t, unixClient(p.socket), "/v1/locks/job", `{"owner":"exec-a"}`); code != 200 {
		t.Fatalf("acquire on the lean sidecar: %d", code)
	}
	out, err := exec.Command(bin, "locks", "--socket", p.socket, "status", "job").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exec-a") {
		t.Errorf("baton-sidecar locks status job: %v %q; want the holder exec-a", err, out)
	}
}
