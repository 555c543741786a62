package highwater

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/kubetest"
)

// The tests share one real kube-apiserver; each starts an etcd of its own,
// since they make it lose its data.
var (
	restConfig *rest.Config
	scheme     = runtime.NewScheme()
	skipReason string
)

func TestMain(m *testing.M) {
	env := &envtest.Environment{}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	cfg, err := kubetest.Start(env, filepath.Join("..", ".."))
	if err != nil {
		skipReason = kubetest.Unavailable("highwater tests: no kube-apiserver", err)
	}
	restConfig = cfg
	code := etcdtest.MainWithoutEtcd(m)
	if cfg != nil {
		env.Stop()
	}
	os.Exit(code)
}

// start runs a controller manager with a Keeper of cfg on cli until the
// returned stop is called (or the test ends).
func start(t *testing.T, cli *clientv3.Client, cfg Config) (stop func()) {
	t.Helper()
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
	log := zap.New(zap.WriteTo(io.Discard))
	if os.Getenv("BATON_TEST_LOG") != "" { // the components' logs, to stderr
		log = zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true))
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Scheme: scheme, Logger: log, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(mgr, cli, cfg); err != nil {
		t.Fatal(err)
	}
	return kubetest.Run(t, mgr)
}

// newEtcd starts an etcd of the test's own, removed when it ends, and
// returns it with a client of it and a client of the apiserver.
func newEtcd(t *testing.T) (*etcdtest.Server, *clientv3.Client, client.Client) {
	t.Helper()
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
	e, err := etcdtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, _ := e.Client(t)
	return e, cli, kube(t)
}

func kube(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mark reads the ConfigMap's mark; -1 when there is none.
func mark(t *testing.T, c client.Client, cfg Config) int64 {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: cfg.Name}, &cm); err != nil {
		return -1
	}
	v, err := strconv.ParseInt(cm.Data[keyRevision], 10, 64)
	if err != nil {
		t.Fatalf("the ConfigMap's mark %q: %v", cm.Data[keyRevision], err)
	}
	return v
}

// floor reads a scope's fence floor key; 0 when there is none.
func floor(t *testing.T, cli *clientv3.Client, scope string) int64 {
	t.Helper()
	l, _ := keyspace.NewLayout(scope)
	r, err := cli.Get(context.Background(), l.Floor())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return 0
	}
	v, _ := strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
	return v
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not after %v: %s", d, what)
		}
	}
}

// puts writes n keys of scope, raising etcd's revision by n; it returns
// the revision after the last.
func puts(t *testing.T, cli *clientv3.Client, scope string, n int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		r, err := cli.Put(context.Background(), fmt.Sprintf("%s%s/locks/k/%d", keyspace.Root, scope, i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	return rev
}

// TestFloorAfterEverythingForgot: the fences' high-water mark outlives
// etcd's data, the controller and every sidecar. An etcd that lost its data
// directory while the controller was replaced (nobody that saw the
// revisions runs on) comes back at revision 1; the new controller reads
// the mark from its ConfigMap, finds etcd below it and writes it, with a
// margin, into the floor of every scope: the namespaces', those found in
// etcd now, and those seen there before the loss (kept in the ConfigMap).
// Once etcd's revision passes the floor, the mark follows it again.
func TestFloorAfterEverythingForgot(t *testing.T) {
	e, cli, k := newEtcd(t)
	if err := k.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hw-app"}}); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Namespace, cfg.Name, cfg.Interval, cfg.SaveEvery = "default", "hw-forgot", 20*time.Millisecond, 0

	high := puts(t, cli, "hw-app", 60)
	// Scopes no namespace names, next to each other in etcd's key order
	// ("-" and "." sort before "/", "0" after it).
	custom := []string{"x", "x-y", "x.y", "x0"}
	for _, s := range custom {
		high = puts(t, cli, s, 1)
	}
	stop := start(t, cli, cfg)
	eventually(t, 10*time.Second, "the mark saved", func() bool { return mark(t, k, cfg) >= high })
	if f := floor(t, cli, "hw-app"); f != 0 {
		t.Fatalf("a floor of %d written while etcd went only forward", f)
	}
	stop()
	saved := mark(t, k, cfg)

	// etcd loses its data directory; the controller is replaced.
	e.Stop()
	if err := os.RemoveAll(filepath.Join(e.Dir, "data")); err != nil {
		t.Fatal(err)
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	low := puts(t, cli, "hw-etcd-only", 1) // a scope that no namespace names
	if low >= saved {
		t.Fatalf("etcd made anew is at revision %d, not below the mark %d", low, saved)
	}
	start(t, cli, cfg)
	for _, scope := range append([]string{"hw-app", "default", "hw-etcd-only"}, custom...) {
		eventually(t, 10*time.Second, "the floor of scope "+scope, func() bool { return floor(t, cli, scope) >= saved+minMargin })
	}
	if m := mark(t, k, cfg); m != saved {
		t.Errorf("the mark went from %d to %d while etcd was below it", saved, m)
	}
	if f := floor(t, cli, "hw-unseen"); f != 0 {
		t.Errorf("a floor of %d for a scope nobody named", f)
	}

	// A revision bump past the floor (here: writes): the mark follows
	// etcd again, and the floors stay, below etcd's revision.
	written := floor(t, cli, "hw-app")
	past := puts(t, cli, "hw-app", int(written-low)+10)
	eventually(t, 10*time.Second, "the mark past the bump", func() bool { return mark(t, k, cfg) >= past })
	if f := floor(t, cli, "hw-app"); f != written {
		t.Errorf("the floor is %d after the bump, want %d", f, written)
	}
}

// TestNoMarkNoFloor: a first start (no ConfigMap) on an etcd at any
// revision takes that revision as its mark and writes no floor, and makes
// the ConfigMap again when it is deleted; a mark that is not a revision
// stops the checks (nothing is written) until it is put right.
func TestNoMarkNoFloor(t *testing.T) {
	_, cli, k := newEtcd(t)
	cfg := Default()
	cfg.Namespace, cfg.Name, cfg.Interval, cfg.SaveEvery = "default", "hw-first", 20*time.Millisecond, 0
	start(t, cli, cfg)
	eventually(t, 10*time.Second, "the mark saved", func() bool { return mark(t, k, cfg) > 0 })
	if f := floor(t, cli, "default"); f != 0 {
		t.Errorf("a first start wrote a floor of %d", f)
	}
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name}}
	if err := k.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	puts(t, cli, "default", 5)
	eventually(t, 10*time.Second, "the ConfigMap made again", func() bool { return mark(t, k, cfg) > 0 })

	bad := cfg
	bad.Name = "hw-bad"
	if err := k.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bad.Namespace, Name: bad.Name}, Data: map[string]string{keyRevision: "12a"}}); err != nil {
		t.Fatal(err)
	}
	start(t, cli, bad)
	time.Sleep(300 * time.Millisecond)
	var got corev1.ConfigMap
	if err := k.Get(ctx, client.ObjectKey{Namespace: bad.Namespace, Name: bad.Name}, &got); err != nil || got.Data[keyRevision] != "12a" {
		t.Errorf("a mark that is not a revision was overwritten: %v %v", got.Data, err)
	}
	if _, err := parseMark("12a"); err == nil {
		t.Error("a mark of 12a was read as a revision")
	}
	if v, err := parseMark(""); err != nil || v != 0 {
		t.Errorf("no mark: %d %v, want 0", v, err)
	}
}
