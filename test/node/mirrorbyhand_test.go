package node

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMirrorByHand runs, as written, docs/kubernetes.md's commands that
// show the mirror without the chart, once the chart is gone from the node:
// a sidecar, two jobs and the mirror on this machine, kubectl get locks,
// a force release by annotation, a second sidecar standing for another
// cluster's pod on the same etcd, and a LockPolicy applied by the mirror.
func TestMirrorByHand(t *testing.T) {
	needNode(t)
	// After TestBatonOnANode's last uninstall, its pods go.
	eventually(t, 2*time.Minute, "no pods of the chart", func() error {
		if pods := kubectl(t, "get", "pods", "-n", system, "-o", "name"); pods != "" {
			return fmt.Errorf("left: %s", pods)
		}
		return nil
	})
	// The page's commands run "after make build", which writes bin/baton.
	if out, err := runMake(node.dir, "build"); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	sh := newDocShell(t)
	// kubectl on PATH, as the install's first command puts it.
	sh.one(t, "$ export PATH=$PWD/bin:$PWD/bin/k8s:$PATH")

	holds := func(sock, owner string) check {
		return func(_, _ string) error {
			out, err := sh.output("bin/baton locks list --socket " + sock)
			if err != nil {
				return fmt.Errorf("baton locks list: %w\n%s", err, out)
			}
			if !strings.Contains(out, owner) {
				return fmt.Errorf("%s not shown holding:\n%s", owner, out)
			}
			return nil
		}
	}
	sh.run(t, "$ kubectl apply -f config/crd -f config/rbac", map[string]check{
		"POD_NAMESPACE=team-a POD_NAME=pod-a":                                 printed("serving"),
		"bin/baton run --socket ./baton.sock --key deploy/prod --owner job-1": holds("./baton.sock", "job-1"),
		"bin/baton run --socket ./baton.sock --key deploy/prod --owner job-2": printed("waiting for deploy/prod: 1 ahead"),
		"kubectl get locks -A": table("NAMESPACE", "NAME", "KEY", "PHASE", "HOLDER", "POD", "WAITERS"),
	})

	start := time.Now()
	sh.run(t, "$ kubectl annotate lock -n team-a deploy-prod-1a7b4df2", map[string]check{
		"kubectl annotate":            exactly,
		"kubectl get locks -n team-a": table("NAME", "KEY", "PHASE", "HOLDER", "POD", "WAITERS"),
	})
	t.Logf("job-2 was shown holding the lock %v after the annotation", time.Since(start).Round(time.Millisecond))
	// The first job's baton run (the block's fourth command, its second
	// in the background) was told its lock was taken, and ended.
	eventually(t, 30*time.Second, "job-1's baton run told the lock was force released", func() error {
		if out := sh.background(1); !strings.Contains(strings.ToLower(out), "force") {
			return fmt.Errorf("it printed %q", out)
		}
		return nil
	})

	sh.run(t, "$ POD_NAMESPACE=team-a POD_NAME=pod-w bin/baton serve --socket ./west.sock", map[string]check{
		"POD_NAMESPACE=team-a POD_NAME=pod-w": printed("serving"),
		"bin/baton run --socket ./west.sock":  holds("./west.sock", "job-w"),
		"kubectl get locks -n team-a -o wide": table("NAME", "KEY", "PHASE", "HOLDER", "POD", "CLUSTER", "WAITERS"),
	})

	sh.run(t, "$ kubectl apply -f examples/k8s/lockpolicy.yaml", map[string]check{
		"kubectl get lockpolicies -n team-a": table("NAME", "APPLIED"),
	})

	// A mirror told to make a ClusterRole that is not there the owner of
	// the Lock objects does not start, saying which.
	out, err := sh.output(`bin/baton mirror --etcd-endpoints http://127.0.0.1:2379 --health-addr "" --metrics-addr "" --leader-elect=false --owner-cluster-role no-such-role`)
	if err == nil || !strings.Contains(out, `the ClusterRole no-such-role, owner of the Lock objects (--owner-cluster-role)`) || !strings.Contains(out, "not found") {
		t.Errorf("a mirror owning its Locks by a missing ClusterRole: %v\n%s", err, out)
	}
}
