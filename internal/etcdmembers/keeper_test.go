package etcdmembers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/baton-dev/baton/internal/pki"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/kubetest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.MainWithoutEtcd(m)) }

// kube is the tests' real kube-apiserver and a namespace of their own.
type kube struct {
	c  client.Client
	ns string
}

func startKube(t *testing.T) *kube {
	t.Helper()
	env := &envtest.Environment{}
	kcfg, err := kubetest.Start(env, filepath.Join("..", ".."))
	if err != nil {
		t.Skip(kubetest.Unavailable("etcd members tests: no kube-apiserver", err))
	}
	t.Cleanup(func() { env.Stop() })
	c, err := client.New(kcfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &kube{c: c, ns: "default"}
}

// namespace creates the tests' namespace.
func (k *kube) namespace(t *testing.T) {
	t.Helper()
	if err := k.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}); err != nil {
		t.Fatal(err)
	}
}

// A member pod's states as its kubelet reports them: its gate waits (for
// a minute), its gate has just started, etcd runs past it, or nothing
// has started yet.
const (
	gated   = "gated"
	gating  = "gating"
	started = "started"
	pending = "pending"
)

// pod creates (or creates again, with a new UID) the member pod name,
// with the chart's gate and etcd containers, in state.
func (k *kube) pod(t *testing.T, name, state string) {
	t.Helper()
	ctx := context.Background()
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns}}
	if err := k.c.Delete(ctx, old, client.GracePeriodSeconds(0)); err == nil {
		for k.c.Get(ctx, client.ObjectKeyFromObject(old), old) == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{"app": "etcd"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: GateContainer, Image: "baton"}},
			Containers:     []corev1.Container{{Name: "etcd", Image: "etcd"}},
		},
	}
	if err := k.c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	k.status(t, name, state)
}

// status sets pod name's status as its kubelet reports it in state.
func (k *kube) status(t *testing.T, name, state string) {
	t.Helper()
	ctx := context.Background()
	var p corev1.Pod
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	switch state {
	case gated, gating:
		at := metav1.NewTime(now.Add(-time.Minute))
		if state == gating {
			at = now
		}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: GateContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	case started:
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: GateContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	default:
		return
	}
	if err := k.c.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
}

// state is the verdict on pod name.
func (k *kube) state(t *testing.T, name string) string {
	t.Helper()
	return k.annotation(t, name, StateAnnotation)
}

// annotation is pod name's annotation key.
func (k *kube) annotation(t *testing.T, name, key string) string {
	t.Helper()
	var p corev1.Pod
	if err := k.c.Get(context.Background(), client.ObjectKey{Namespace: k.ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations[key]
}

// annotate sets pod name's annotations.
func (k *kube) annotate(t *testing.T, name string, kv map[string]string) {
	t.Helper()
	var p corev1.Pod
	if err := k.c.Get(context.Background(), client.ObjectKey{Namespace: k.ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Annotations = kv
	if err := k.c.Patch(context.Background(), &p, patch); err != nil {
		t.Fatal(err)
	}
}

func (k *kube) keeper(t *testing.T, cli *clientv3.Client, peers []Peer) *Keeper {
	t.Helper()
	cfg := Default()
	cfg.Namespace, cfg.Selector, cfg.Peers, cfg.Timeout = k.ns, "app=etcd", peers, 2*time.Second
	kp, err := New(cli, k.c, k.c, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// testCerts are the members' TLS files (one serving certificate for all,
// as the chart's) and the root user's client TLS.
type testCerts struct {
	ca, cert, key string
	root          *tls.Config
}

// newCerts issues them from a CA of their own.
func newCerts(t *testing.T) *testCerts {
	t.Helper()
	dir, now := t.TempDir(), time.Now()
	ca, err := pki.NewCA("etcd-ca", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue(pki.Request{CommonName: "etcd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	root, err := ca.Issue(pki.Request{CommonName: "root", Client: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCerts{ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	for f, b := range map[string][]byte{c.ca: ca.CertPEM, c.cert: srv.CertPEM, c.key: srv.KeyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pair, err := tls.X509KeyPair(root.CertPEM, root.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c.root = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return c
}

// member is one etcd member in this process, as a pod of the chart runs
// it: its name, its data directory, its peer and client URLs, its
// certificates (clients must show one of their CA; its common name is
// their etcd user).
type member struct {
	name, dir, peer, client string
	certs                   *testCerts
	e                       *embed.Etcd
}

// start starts m with --initial-cluster initial, in state ("new" or
// "existing").
func (m *member) start(t *testing.T, initial, state string) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.name, m.dir
	pu, _ := url.Parse(m.peer)
	cu, _ := url.Parse(m.client)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = initial, state, "baton-test"
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: m.certs.cert, KeyFile: m.certs.key, TrustedCAFile: m.certs.ca, ClientCertAuth: true}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd member %s (%s): %v", m.name, state, err)
	}
	m.e = e
	if state == "new" {
		return // the members of a new cluster are ready together
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatalf("etcd member %s did not join in 30s", m.name)
	}
}

func (m *member) stop() {
	if m.e != nil {
		m.e.Close()
		m.e = nil
	}
}

// cluster starts three members with state new.
func cluster(t *testing.T) ([]*member, []Peer, *clientv3.Client) {
	t.Helper()
	ms, peers := members(t)
	var endpoints []string
	for _, m := range ms {
		m.start(t, initialCluster(peers), StateNew)
		endpoints = append(endpoints, m.client)
	}
	for _, m := range ms {
		select {
		case <-m.e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			t.Fatalf("etcd member %s not ready in 30s", m.name)
		}
	}
	return ms, peers, rootClient(t, ms[0].certs, endpoints...)
}

// members makes three members, started by none, stopped when t ends.
func members(t *testing.T) ([]*member, []Peer) {
	t.Helper()
	dir, certs := t.TempDir(), newCerts(t)
	var ms []*member
	var peers []Peer
	for i := range 3 {
		m := &member{name: fmt.Sprintf("etcd-%d", i), dir: filepath.Join(dir, fmt.Sprint(i)), peer: etcdtest.FreeURL(t), client: "https" + strings.TrimPrefix(etcdtest.FreeURL(t), "http"), certs: certs}
		t.Cleanup(m.stop)
		ms = append(ms, m)
		peers = append(peers, Peer{Name: m.name, URL: m.peer})
	}
	return ms, peers
}

// sameCluster reports whether two --initial-cluster values name the same
// members, in any order.
func sameCluster(a, b string) bool {
	pa, pb := strings.Split(a, ","), strings.Split(b, ",")
	slices.Sort(pa)
	slices.Sort(pb)
	return slices.Equal(pa, pb)
}

// until runs pass until done says so, for up to d.
func until(t *testing.T, d time.Duration, what string, pass func() error, done func() bool) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(d); !done(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v (last pass: %v)", what, d, last)
		}
		last = pass()
	}
}
