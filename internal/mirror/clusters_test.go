package mirror

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/testing/kubetest"
)

// TestClustersShareOneEtcd: two Kubernetes clusters, each with its own
// kube-apiserver and mirror, whose sidecars share one etcd and one scope
// (a namespace of the same name in both). Their sidecars contend for the
// same locks: a refusal names the holder's cluster, a lock released in one
// is handed to a waiter in the other, and each cluster's Lock objects show
// every holder, whichever cluster it is in, with its cluster.
func TestClustersShareOneEtcd(t *testing.T) {
	needAPIServer(t)
	westEnv, west := secondCluster(t)
	kubes := map[string]client.Client{"east": kube(t), "west": kubeOf(t, west)}
	const scope = "shared-etcd"
	for _, kc := range kubes {
		namespace(t, kc, scope)
	}
	eastCli, _ := testEtcd.Client(t)
	westCli, _ := testEtcd.Client(t)
	startMirrorIn(t, restConfig, eastCli, time.Hour)
	startMirrorIn(t, west, westCli, time.Hour)
	e := newSidecarIn(t, onTestEtcd(t), scope, "api-east", "east")
	w := newSidecarIn(t, onTestEtcd(t), scope, "api-west", "west")
	ctx := context.Background()

	report, nightly := key(t, "report"), key(t, "nightly")
	g, err := e.c.Acquire(ctx, coordinator.AcquireRequest{Key: report, Owner: "run-east", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.c.Acquire(ctx, coordinator.AcquireRequest{Key: report, Owner: "run-west", TTL: time.Minute})
	var held *coordinator.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != "run-east" || held.Holder.Cluster != "east" {
		t.Fatalf("west's try of a lock east holds: %v; want refused, held by run-east in east", err)
	}
	if _, err := w.c.Acquire(ctx, coordinator.AcquireRequest{Key: nightly, Owner: "run-west", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for name, kc := range kubes {
		lockShows(t, kc, scope, report, 10*time.Second, name+"'s Lock of report", heldIn("run-east", "api-east", "east"))
		lockShows(t, kc, scope, nightly, 10*time.Second, name+"'s Lock of nightly", heldIn("run-west", "api-west", "west"))
	}
	out := kubectlIn(t, westEnv, west, "get", "locks", "-n", scope, "-o", "wide")
	if !regexp.MustCompile(`(?m)^NAME .* CLUSTER `).MatchString(out) || !regexp.MustCompile(`(?m)^report-\S+ +report +Held +run-east +api-east +east `).MatchString(out) {
		t.Errorf("west's kubectl get locks -o wide:\n%s\nwant the CLUSTER column, report held in east", out)
	}

	// A waiter in west is handed the lock east releases; both clusters
	// show it passed.
	granted := make(chan error, 1)
	go func() {
		_, err := w.c.Acquire(ctx, coordinator.AcquireRequest{Key: report, Owner: "run-west", TTL: time.Minute, Wait: 10 * time.Second})
		granted <- err
	}()
	for name, kc := range kubes {
		lockShows(t, kc, scope, report, 10*time.Second, name+"'s Lock counting west's waiter", func(l *batonv1.Lock) error {
			if l.Status.Waiters != 1 {
				return fmt.Errorf("%d waiters; want 1", l.Status.Waiters)
			}
			return nil
		})
	}
	if _, err := e.c.Release(ctx, report, g.Owner); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("west's waiter: %v", err)
	}
	for name, kc := range kubes {
		lockShows(t, kc, scope, report, 10*time.Second, name+"'s Lock of report handed to west", heldIn("run-west", "api-west", "west"))
	}
}

// heldIn checks that a Lock is held by owner through pod in cluster.
func heldIn(owner, pod, cluster string) func(*batonv1.Lock) error {
	return func(l *batonv1.Lock) error {
		h := l.Status.Holder
		if l.Status.Phase != batonv1.PhaseHeld || h == nil || h.Owner != owner || h.Pod != pod || h.Cluster != cluster {
			return fmt.Errorf("phase %s, holder %+v; want held by %s through %s in %s", l.Status.Phase, h, owner, pod, cluster)
		}
		return nil
	}
}

// secondCluster starts a second kube-apiserver, a cluster of its own with
// the Lock CRD, for the test.
func secondCluster(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	rc, err := kubetest.Start(env, filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("a second kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the second kube-apiserver: %v", err)
		}
	})
	return env, rc
}
