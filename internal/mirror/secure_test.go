package mirror

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestMirrorOnSecureEtcd: on an etcd with TLS, client certificates and
// authentication, where each namespace's sidecars may use only their own
// scope, the controller's user (its role reads and writes every scope)
// mirrors the locks of both namespaces and carries out a force release in
// either.
func TestMirrorOnSecureEtcd(t *testing.T) {
	needAPIServer(t)
	sec, err := etcdtest.StartSecure()
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc := kube(t)
	namespaces := []string{namespace(t, kc, "secure-a"), namespace(t, kc, "secure-b")}
	for _, ns := range namespaces {
		if err := sec.AddUser(ctx, ns, ""); err != nil {
			t.Fatal(err)
		}
		if err := sec.GrantScope(ctx, ns, ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := sec.AddUser(ctx, "baton-controller", ""); err != nil {
		t.Fatal(err)
	}
	if err := sec.Grant(ctx, "baton-controller", keyspace.Root); err != nil {
		t.Fatal(err)
	}
	ctl, err := sec.Client("baton-controller", "")
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	startMirrorOn(t, ctl, time.Minute)

	k := key(t, "nightly/report")
	var last *batonv1.Lock
	for _, ns := range namespaces {
		s := newSidecarIn(t, func(opts ...grpc.DialOption) (*clientv3.Client, error) { return sec.Client(ns, "", opts...) }, ns, "pod-"+ns, "")
		g, err := s.c.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "job-" + ns, TTL: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		last = lockShows(t, kc, ns, k, 10*time.Second, "held in "+ns, heldBy("job-"+ns, "pod-"+ns, g.Fence, 0))
	}

	ns := namespaces[1]
	kubectl(t, "annotate", "-n", ns, "lock", last.Name, batonv1.AnnotationForceRelease+"=rotated credentials")
	lockShows(t, kc, ns, k, 10*time.Second, "free after the force release", func(l *batonv1.Lock) error {
		if l.Status.Phase != batonv1.PhaseFree {
			return fmt.Errorf("status %+v", l.Status)
		}
		return nil
	})
	l, err := keyspace.NewLayout(ns)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := sec.Root().Get(ctx, l.LockPrefix(k), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("keys of the force-released lock: %v %v, want none", r, err)
	}
}
