package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// releaseThroughProxy measures, through the node's etcd gRPC proxy, how
// long a lock held by a baton run stays held after its sidecar crashes
// (SIGKILL: the kubelet restarts it, and the new sidecar lets go of the
// hold that died with the old one), after its pod is deleted at once
// (force: the sidecar is stopped, its connections close) and after its
// sidecar freezes (SIGSTOP: its connections stay open and silent, as in a
// partition or on a frozen node). etcd's proxy renews a lease for as long as
// it hears from the lease's client within a TTL, and a silent connection
// keeps it hearing nothing without ending: the chart has the proxy ping
// its clients (etcd.proxy.keepaliveInterval and keepaliveTimeout) and drop
// those that do not answer, which ends its renewals. Either way the lock
// must be free within the lease TTL and the proxy's ping and wait (2s by
// default), plus a second of margin.
func releaseThroughProxy(t *testing.T, pods []string, ttl time.Duration) {
	bound := ttl + 2*time.Second + time.Second
	for i, c := range []struct {
		name string
		sig  syscall.Signal // 0: delete the pod
	}{{"crashed sidecar", syscall.SIGKILL}, {"frozen sidecar", syscall.SIGSTOP}, {"deleted pod", 0}} {
		pod := pods[i]
		key := "proxy-" + strings.Fields(c.name)[0]
		prefix := "/baton/v1/" + proxyDemo + "/locks/" + key + "/"
		// The holder takes the lock again after each loss, as a worker
		// would; what is measured is the end of the key the sidecar had.
		holder := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "exec", "-n", proxyDemo, pod, "-c", "worker", "--",
			"sh", "-c", "while :; do /tools/baton run --key "+key+" --wait 1m -- sleep 600; sleep 1; done")
		holder.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		// The holder's key, by its create revision (its fence): a
		// restarted sidecar resumes its lease, so the next holder's key
		// may have the same name.
		var held int64
		eventually(t, 90*time.Second, "the "+key+" lock held through the proxy", func() error {
			for _, rev := range etcdKeys(t, prefix) {
				held = rev
				return nil
			}
			return fmt.Errorf("no key under %s", prefix)
		})
		pid := sidecarPid(t, pod)
		start := time.Now()
		if c.sig == 0 {
			kubectl(t, "delete", "pod", "-n", proxyDemo, pod, "--grace-period=0", "--force")
		} else if err := syscall.Kill(pid, c.sig); err != nil {
			t.Fatal(err)
		}
		// Each read of etcd goes through kubectl exec and takes a while on
		// a loaded node: the key was still there when the last read that
		// saw it began, and gone before the first that did not ended.
		var seen time.Duration
		eventually(t, 3*ttl, "the "+c.name+"'s lock gone from etcd", func() error {
			began := time.Since(start)
			for k, rev := range etcdKeys(t, prefix) {
				if rev == held {
					seen = began
					return fmt.Errorf("%s (fence %d) still there", k, held)
				}
			}
			return nil
		})
		took := time.Since(start)
		if c.sig == syscall.SIGSTOP {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = holder.Process.Kill()
		_ = holder.Wait()
		t.Logf("through etcd's gRPC proxy, a %s's lock was free after %v to %v (lease TTL %v)", c.name, seen.Round(100*time.Millisecond), took.Round(100*time.Millisecond), ttl)
		if seen > bound {
			t.Errorf("a %s's lock was still held %v after through the proxy; want at most %v (the lease TTL, the proxy's ping and wait, a second of margin)", c.name, seen, bound)
		}
	}
}

// etcdKeys reads the keys under prefix in the proxy release's etcd, with
// etcdctl there: each key's create revision.
func etcdKeys(t *testing.T, prefix string) map[string]int64 {
	t.Helper()
	out := kubectl(t, "exec", "-n", system, release+"-etcd-0", "-c", "etcd", "--",
		"etcdctl", "get", "--prefix", "--keys-only", "-w", "json", prefix)
	var r struct {
		Kvs []struct {
			Key            []byte `json:"key"`
			CreateRevision int64  `json:"create_revision"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("etcdctl get -w json: %v: %s", err, out)
	}
	keys := map[string]int64{}
	for _, kv := range r.Kvs {
		keys[string(kv.Key)] = kv.CreateRevision
	}
	return keys
}

// sidecarPid finds, on this host, the process of pod's Baton sidecar: the
// image's /baton serving, with the pod's name in its environment.
func sidecarPid(t *testing.T, pod string) int {
	t.Helper()
	var found int
	eventually(t, 30*time.Second, "the sidecar process of "+pod, func() error {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			env := append([]byte{0}, environ...)
			if strings.HasPrefix(string(cmdline), "/baton\x00serve\x00") && bytes.Contains(env, []byte("\x00POD_NAME="+pod+"\x00")) {
				found = pid
				return nil
			}
		}
		return fmt.Errorf("no /baton serve with POD_NAME=%s", pod)
	})
	return found
}
