package mirror

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/kubetest"
	"github.com/baton-dev/baton/internal/testing/sidecartest"
)

// The package's tests share one real kube-apiserver (envtest, with the
// binaries `make envtest-assets` builds into bin/k8s) and one embedded etcd
// holding the locks.
var (
	testEtcd   *etcdtest.Server
	testEnv    *envtest.Environment
	restConfig *rest.Config
	scheme     = runtime.NewScheme()
	skipReason string
	// forceReleases counts the force releases of the mirrors the tests
	// start (OnForceRelease).
	forceReleases atomic.Int64
)

func TestMain(m *testing.M) {
	code := etcdtest.Main(m, func(s *etcdtest.Server) {
		testEtcd = s
		if err := startAPIServer(); err != nil {
			skipReason = kubetest.Unavailable("mirror tests: no kube-apiserver", err)
		}
	})
	if restConfig != nil {
		testEnv.Stop()
	}
	os.Exit(code)
}

// startAPIServer starts envtest with the Lock CRD of config/crd.
func startAPIServer() error {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		return err
	}
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := kubetest.Start(testEnv, filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	restConfig = cfg
	return nil
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
}

// startMirror runs a leader-elected manager with the mirror until the
// returned stop is called (or the test ends).
func startMirror(t *testing.T, retention time.Duration) (stop func()) {
	t.Helper()
	cli, _ := testEtcd.Client(t)
	return startMirrorOn(t, cli, retention)
}

// startMirrorOn is startMirror with the etcd client cli.
func startMirrorOn(t *testing.T, cli *clientv3.Client, retention time.Duration) (stop func()) {
	t.Helper()
	return startMirrorIn(t, restConfig, cli, retention)
}

// startMirrorIn is startMirrorOn in the cluster of the apiserver rc.
func startMirrorIn(t *testing.T, rc *rest.Config, cli *clientv3.Client, retention time.Duration) (stop func()) {
	t.Helper()
	return startMirrorWith(t, rc, cli, retention, nil)
}

// startMirrorWith is startMirrorIn with the manager's options changed by
// change (when not nil) and the mirror's by configure.
func startMirrorWith(t *testing.T, rc *rest.Config, cli *clientv3.Client, retention time.Duration, change func(*ctrl.Options), configure ...func(*Config)) (stop func()) {
	t.Helper()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if os.Getenv("BATON_TEST_LOG") != "" { // the components' logs, to stderr
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	}
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              "baton-mirror",
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: true,
	}
	if change != nil {
		change(&opts)
	}
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.FreeRetention = retention
	cfg.RetryInterval = 100 * time.Millisecond
	for _, f := range configure {
		f(&cfg)
	}
	if _, err := Setup(mgr, cfg, cli, OnForceRelease(func() { forceReleases.Add(1) })); err != nil {
		t.Fatal(err)
	}
	return kubetest.Run(t, mgr)
}

// kube returns a client of the test apiserver.
func kube(t *testing.T) client.Client {
	t.Helper()
	return kubeOf(t, restConfig)
}

// kubeOf returns a client of the apiserver rc.
func kubeOf(t *testing.T, rc *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// namespace creates a namespace for one test; its name is also the scope.
func namespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// sidecar is a lock engine as a sidecar runs it, in this process.
type sidecar struct {
	c     *coordinator.Coordinator
	elect *coordinator.Coordinator // its elections
	cli   *clientv3.Client
}

func newSidecar(t *testing.T, scope, pod string) *sidecar {
	t.Helper()
	return newSidecarIn(t, onTestEtcd(t), scope, pod, "")
}

// onTestEtcd dials the test's etcd.
func onTestEtcd(t *testing.T) engine.Dial {
	return func(opts ...grpc.DialOption) (*clientv3.Client, error) {
		cli, _ := testEtcd.Client(t, opts...)
		return cli, nil
	}
}

// newSidecarIn is newSidecar on the etcd dial reaches, in the Kubernetes
// cluster named cluster.
func newSidecarIn(t *testing.T, dial engine.Dial, scope, pod, cluster string) *sidecar {
	t.Helper()
	e := sidecartest.StartWith(t, dial, pod, func(c *engine.Config) {
		c.Coordinator.Scope = scope
		c.Coordinator.Identity = coordinator.Identity{Pod: pod, Namespace: scope, Node: "node-1", Cluster: cluster}
	})
	return &sidecar{c: e.Coord, elect: e.Elect, cli: e.Client}
}

func key(t *testing.T, s string) keyspace.Key {
	t.Helper()
	k, err := keyspace.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// waitFor polls cond until it returns nil, failing with its last error
// after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockShows waits until the Lock of key k in ns satisfies check.
func lockShows(t *testing.T, c client.Client, ns string, k keyspace.Key, d time.Duration, what string, check func(*batonv1.Lock) error) *batonv1.Lock {
	t.Helper()
	var obj batonv1.Lock
	waitFor(t, d, what, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ObjectName(k.String())}, &obj); err != nil {
			return err
		}
		return check(&obj)
	})
	return &obj
}
