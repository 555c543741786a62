package main

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/baton-dev/baton/internal/testing/kubetest"
)

// postgresStore: a PostgreSQL server of the test's (Debian's postgresql
// package: make test installs it), listening on a unix socket only, with
// docs/fencing.md's table.
func postgresStore() fencedStore {
	return fencedStore{
		name:  "postgres",
		write: "postgres-write.sh",
		setup: func(t *testing.T, _ string) []string {
			env := startPostgres(t)
			cmd := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", filepath.Join("..", "..", "examples", "fencing", "postgres-table.sql"))
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("psql -f postgres-table.sql: %v\n%s", err, out)
			}
			return env
		},
		read: func(t *testing.T, run func(string) string) string {
			return strings.TrimSpace(run(`psql -X -A -t -c "SELECT body FROM report WHERE id = 'daily'"`))
		},
	}
}

// startPostgres starts a PostgreSQL server in a directory of the test's
// and returns the environment that psql reaches it with. PostgreSQL does
// not run as root: as root, it runs as the postgres user the package
// makes.
func startPostgres(t *testing.T) []string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		t.Fatal("PostgreSQL's server is needed (Debian's postgresql package; make test installs it)")
	}
	bin := filepath.Dir(bins[len(bins)-1])
	dir, err := os.MkdirTemp("", "baton-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("as root, PostgreSQL runs as the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	as := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = dir
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := as("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	server := as("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off")
	var log syncBuffer
	server.Stdout, server.Stderr = &log, &log
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		server.Process.Signal(syscall.SIGINT) // fast shutdown
		server.Wait()
		if t.Failed() {
			t.Logf("postgres:\n%s", log.String())
		}
	})
	env := []string{"PGHOST=" + dir, "PGUSER=postgres", "PGDATABASE=postgres"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cmd := exec.Command(filepath.Join(bin, "pg_isready"), "-q")
		cmd.Env = append(os.Environ(), env...)
		if cmd.Run() == nil {
			return env
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready in 30s:\n%s", log.String())
		}
	}
}

// etcdStore: the test's etcd, with the fence key created as
// etcd-write.sh says.
func etcdStore() fencedStore {
	return fencedStore{
		name:  "etcd",
		write: "etcd-write.sh",
		setup: func(t *testing.T, dir string) []string {
			env := []string{"ETCDCTL_ENDPOINTS=" + strings.Join(testEtcd.Endpoints(), ",")}
			cmd := exec.Command("sh", "-c", "etcdctl put /app/report/fence 00000000000000000000")
			cmd.Dir = dir
			cmd.Env = withK8sBin(t, env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("etcdctl put: %v\n%s", err, out)
			}
			return env
		},
		read: func(t *testing.T, run func(string) string) string {
			return strings.TrimSpace(run("etcdctl get /app/report --print-value-only"))
		},
	}
}

// kubeStore: a kube-apiserver of the test's, with fence-policy.yaml
// applied and enforced, and the ConfigMap report at fence 0.
func kubeStore() fencedStore {
	return fencedStore{
		name:  "kubernetes",
		write: "kube-write.sh",
		setup: func(t *testing.T, dir string) []string {
			env := &envtest.Environment{}
			if _, err := kubetest.Start(env, filepath.Join("..", "..")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.Stop() })
			admin, err := env.ControlPlane.AddUser(envtest.User{Name: "fencing-admin", Groups: []string{"system:masters"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			kc, err := admin.KubeConfig()
			if err != nil {
				t.Fatal(err)
			}
			kubeconfig := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
				t.Fatal(err)
			}
			vars := []string{"KUBECONFIG=" + kubeconfig}
			kubectl := func(line string) (string, error) {
				cmd := exec.Command("sh", "-c", "kubectl "+line)
				cmd.Env = withK8sBin(t, vars...)
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			for _, line := range []string{
				"apply -f " + filepath.Join("..", "..", "examples", "fencing", "fence-policy.yaml"),
				"create configmap report --from-literal=body=none",
				"annotate configmap report baton.dev/fence=0",
				"create configmap probe --from-literal=body=none",
				"annotate configmap probe baton.dev/fence=5",
			} {
				if out, err := kubectl(line); err != nil {
					t.Fatalf("kubectl %s: %v\n%s", line, err, out)
				}
			}
			// The API server enforces a policy once it has read it: until a
			// lower fence is refused on the probe.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				out, err := kubectl("annotate --overwrite configmap probe baton.dev/fence=4")
				if err != nil && strings.Contains(out, "fence 4 is below 5") {
					break
				}
				if err == nil {
					kubectl("annotate --overwrite configmap probe baton.dev/fence=5")
				}
				if time.Now().After(deadline) {
					t.Fatalf("fence-policy.yaml not enforced within 30s: %v %s", err, out)
				}
			}
			return vars
		},
		read: func(t *testing.T, run func(string) string) string {
			return run("kubectl get configmap report -o jsonpath={.data.body}")
		},
	}
}

// fileStore: a file in the writers' working directory.
func fileStore() fencedStore {
	return fencedStore{
		name:  "file",
		write: "file-write.sh",
		setup: func(*testing.T, string) []string { return nil },
		read: func(t *testing.T, run func(string) string) string {
			lines := strings.Split(strings.TrimSpace(run("cat report")), "\n")
			if len(lines) != 2 {
				t.Fatalf("./report: %q", lines)
			}
			return lines[1]
		},
	}
}

// withK8sBin is the test's environment with vars, and bin/k8s (where make
// puts etcdctl and kubectl) first in PATH.
func withK8sBin(t *testing.T, vars ...string) []string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "bin", "k8s"))
	if err != nil {
		t.Fatal(err)
	}
	return append(append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH")), vars...)
}
