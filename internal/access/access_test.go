package access

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/pki"
	"github.com/baton-dev/baton/internal/testing/kubetest"
)

var (
	restConfig *rest.Config
	skipReason string
)

func TestMain(m *testing.M) {
	env := &envtest.Environment{}
	cfg, err := kubetest.Start(env, filepath.Join("..", ".."))
	if err != nil {
		skipReason = kubetest.Unavailable("access tests: no kube-apiserver", err)
	}
	restConfig = cfg
	code := m.Run()
	if cfg != nil {
		env.Stop()
	}
	os.Exit(code)
}

// TestKeeper runs the keeper as the controller does, on a real
// kube-apiserver and an etcd that serves the certificate the keeper
// issued: it turns etcd's authentication on, gives each namespace with
// injected pods a certificate whose user may read and write its own scope
// only (checked with etcd's own client, as an attacker would), refuses
// plaintext and certificate-less clients, and renews certificates before
// they expire, a deleted one at once.
func TestKeeper(t *testing.T) {
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(restConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"baton", "team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Default()
	cfg.Namespace, cfg.CASecret, cfg.ServerSecret = "baton", "baton-etcd-ca", "baton-etcd-tls"
	cfg.ServerNames, cfg.Validity, cfg.Resync = []string{"localhost", "127.0.0.1"}, 30*time.Second, time.Second
	log := crzap.New(crzap.WriteTo(io.Discard))
	k, err := Prepare(ctx, c, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Prepare(ctx, c, cfg, log)
	if err != nil || !again.ca.Cert.Equal(k.ca.Cert) {
		t.Fatalf("a second start made another CA: %v", err)
	}

	server := readSecret(t, c, "baton", "baton-etcd-tls")
	endpoint := startEtcd(t, server)
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: k.ClientTLS(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	k.Connect(root)
	startManager(t, k)
	waitFor(t, "etcd's authentication on", func() bool {
		st, err := root.AuthStatus(ctx)
		return err == nil && st.Enabled
	})

	// The injector asks for each pod it injects.
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := k.Ensure(ctx, ns); err != nil {
			t.Fatalf("credentials of %s: %v", ns, err)
		}
	}
	a := readSecret(t, c, "team-a", cfg.ClientSecret)
	if cert, _ := pki.ParseCert(a.Data["tls.crt"]); cert == nil || cert.Subject.CommonName != ScopeUser("team-a") {
		t.Fatalf("team-a's certificate: %+v", cert)
	}
	teamA := etcdClient(t, endpoint, a)
	if _, err := teamA.Put(ctx, "/baton/v1/team-a/locks/job/1", ""); err != nil {
		t.Errorf("team-a writes its locks: %v", err)
	}
	if _, err := teamA.Get(ctx, "/baton/v1/team-a/policy"); err != nil {
		t.Errorf("team-a reads its policy: %v", err)
	}
	for what, op := range map[string]func() error{
		"write its own policy": func() error { _, err := teamA.Put(ctx, "/baton/v1/team-a/policy", "{}"); return err },
		"read team-b's locks":  func() error { _, err := teamA.Get(ctx, "/baton/v1/team-b/locks/", clientv3.WithPrefix()); return err },
		"write team-b's locks": func() error { _, err := teamA.Put(ctx, "/baton/v1/team-b/locks/job/1", ""); return err },
		"delete everything":    func() error { _, err := teamA.Delete(ctx, "/", clientv3.WithPrefix()); return err },
	} {
		if err := op(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("team-a may %s: %v", what, err)
		}
	}
	for _, key := range []string{"/baton/v1/team-a/once/migrate", "/baton/v1/team-a/delay/job"} {
		if _, err := teamA.Put(ctx, key, "{}"); err != nil {
			t.Errorf("team-a writes %s: %v", key, err)
		}
	}
	checkRefused(t, endpoint, server)

	// An upgrade grants the sidecars more keys: a new term of leadership
	// brings every scope's role up to date, its certificate current or not.
	teamB := etcdClient(t, endpoint, readSecret(t, c, "team-b", cfg.ClientSecret))
	if _, err := root.RoleRevokePermission(ctx, ScopeUser("team-b"), "/baton/v1/team-b/delay/", "/baton/v1/team-b/delay0"); err != nil {
		t.Fatal(err)
	}
	if _, err := teamB.Put(ctx, "/baton/v1/team-b/delay/job", "{}"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("team-b's role without its delay keys: %v", err)
	}
	next := time.Now().Add(time.Hour)
	if err := k.keepAll(ctx, &next, map[string]bool{}); err != nil {
		t.Fatal(err)
	}
	if _, err := teamB.Put(ctx, "/baton/v1/team-b/delay/job", "{}"); err != nil {
		t.Errorf("team-b's role after a new term: %v", err)
	}

	// Renewal: a certificate is replaced at two thirds of its life (20s
	// here), a deleted one at once.
	before := serial(t, a)
	waitFor(t, "team-a's certificate renewed", func() bool {
		return serial(t, readSecret(t, c, "team-a", cfg.ClientSecret)) != before
	})
	if _, err := etcdClient(t, endpoint, readSecret(t, c, "team-a", cfg.ClientSecret)).Put(ctx, "/baton/v1/team-a/locks/job/2", ""); err != nil {
		t.Errorf("the renewed certificate: %v", err)
	}
	waitFor(t, "etcd's certificate renewed", func() bool { return serial(t, readSecret(t, c, "baton", "baton-etcd-tls")) != serial(t, server) })
	// The user of a namespace that is gone is deleted. The keeper runs
	// beside this test and may delete the ghost's role or user while
	// EnsureScope is still making them: then it has already done what the
	// wait below checks.
	if _, err := EnsureScope(ctx, root, "ghost"); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) && !errors.Is(err, rpctypes.ErrUserNotFound) {
		t.Fatal(err)
	}
	waitFor(t, "the gone namespace's user deleted", func() bool {
		_, err := root.UserGet(ctx, ScopeUser("ghost"))
		return errors.Is(err, rpctypes.ErrUserNotFound)
	})
	if err := c.Delete(ctx, readSecret(t, c, "team-b", cfg.ClientSecret)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "team-b's deleted credentials made again", func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: cfg.ClientSecret}, &corev1.Secret{}) == nil
	})
}

// checkRefused: a client without TLS, and one with TLS but without a
// certificate, get nothing.
func checkRefused(t *testing.T, endpoint string, server *corev1.Secret) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	plain, err := clientv3.New(clientv3.Config{Endpoints: []string{strings.Replace(endpoint, "https://", "http://", 1)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		defer plain.Close()
		if _, err := plain.Get(ctx, "/baton/", clientv3.WithPrefix()); err == nil {
			t.Error("a plaintext client read etcd")
		}
	}
	noCert := etcdClient(t, endpoint, &corev1.Secret{Data: map[string][]byte{"ca.crt": server.Data["ca.crt"]}})
	if _, err := noCert.Get(ctx, "/baton/", clientv3.WithPrefix()); err == nil {
		t.Error("a client without a certificate read etcd")
	}
}

func readSecret(t *testing.T, c client.Client, ns, name string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func serial(t *testing.T, s *corev1.Secret) string {
	t.Helper()
	cert, err := pki.ParseCert(s.Data["tls.crt"])
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber.String()
}

// startEtcd serves etcd over TLS with the certificate of Secret server,
// requiring client certificates of its CA.
func startEtcd(t *testing.T, server *corev1.Secret) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		files[k] = filepath.Join(dir, k)
		if err := os.WriteFile(files[k], server.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := embedetcd.Default(filepath.Join(dir, "data"))
	cfg.ClientURL, cfg.UnsafeNoFsync = "https://127.0.0.1:0", true
	cfg.TLS = &embedetcd.ServerTLS{CertFile: files["tls.crt"], KeyFile: files["tls.key"], TrustedCAFile: files["ca.crt"]}
	e, err := embedetcd.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Endpoints()[0]
}

// etcdClient is a client with the certificate of Secret s, as a sidecar
// that mounts it has.
func etcdClient(t *testing.T, endpoint string, s *corev1.Secret) *clientv3.Client {
	t.Helper()
	dir := t.TempDir()
	info := transport.TLSInfo{TrustedCAFile: filepath.Join(dir, "ca.crt")}
	if len(s.Data["tls.crt"]) > 0 {
		info.CertFile, info.KeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	}
	for k, v := range s.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tlsCfg, err := info.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// startManager runs a manager with the keeper, as the controller does,
// until the test ends.
func startManager(t *testing.T, k *Keeper) {
	t.Helper()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 40s", what)
}

// TestReplicasAgreeOnTheCA: two replicas starting at once end with one CA
// and one etcd certificate of it.
func TestReplicasAgreeOnTheCA(t *testing.T) {
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
	ctx := context.Background()
	c, err := client.New(restConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "replicas"}}); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Namespace, cfg.CASecret, cfg.ServerSecret, cfg.ServerNames = "replicas", "ca", "etcd", []string{"etcd.replicas.svc"}
	keepers := make(chan *Keeper, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			k, err := Prepare(ctx, c, cfg, crzap.New(crzap.WriteTo(io.Discard)))
			keepers <- k
			errs <- err
		}()
	}
	a, b := <-keepers, <-keepers
	if err := errors.Join(<-errs, <-errs); err != nil {
		t.Fatal(err)
	}
	if !a.ca.Cert.Equal(b.ca.Cert) {
		t.Fatal("two replicas made two CAs")
	}
	server, err := pki.ParseCert(readSecret(t, c, "replicas", "etcd").Data["tls.crt"])
	if err != nil || server.CheckSignatureFrom(a.ca.Cert) != nil {
		t.Errorf("etcd's certificate is not of the CA: %v", err)
	}
	// The same validity again keeps it; a shorter one replaces it at once.
	before := serial(t, readSecret(t, c, "replicas", "etcd"))
	if _, err := Prepare(ctx, c, cfg, crzap.New(crzap.WriteTo(io.Discard))); err != nil || serial(t, readSecret(t, c, "replicas", "etcd")) != before {
		t.Errorf("a restart replaced etcd's certificate: %v", err)
	}
	cfg.Validity = time.Hour
	if _, err := Prepare(ctx, c, cfg, crzap.New(crzap.WriteTo(io.Discard))); err != nil || serial(t, readSecret(t, c, "replicas", "etcd")) == before {
		t.Errorf("a shortened validity kept etcd's 30-day certificate: %v", err)
	}
}

// TestExternalCA: with cert-manager keeping the CA (its default key
// encoding, SEC 1) and etcd's certificate, the keeper waits for the CA,
// issues the namespaces' certificates from it, and writes neither the CA
// nor etcd's Secret.
func TestExternalCA(t *testing.T) {
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(restConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"cm", "cm-app"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Default()
	cfg.Namespace, cfg.CASecret, cfg.ExternalCA = "cm", "etcd-ca", true
	ready := make(chan *Keeper, 1)
	go func() {
		k, err := Prepare(ctx, c, cfg, crzap.New(crzap.WriteTo(io.Discard)))
		if err != nil {
			t.Error(err)
		}
		ready <- k
	}()
	time.Sleep(1500 * time.Millisecond) // Prepare waits meanwhile
	select {
	case <-ready:
		t.Fatal("Prepare returned before the CA was made")
	default:
	}
	ca, err := pki.NewCA("cert-manager-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(ca.KeyPEM)
	key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sec1, _ := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cm", Name: "etcd-ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": ca.CertPEM, "tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), "ca.crt": ca.CertPEM}}); err != nil {
		t.Fatal(err)
	}
	k := <-ready
	if k == nil || !k.ca.Cert.Equal(ca.Cert) {
		t.Fatal("the keeper does not use cert-manager's CA")
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace("cm")); err != nil || len(secrets.Items) != 1 {
		t.Errorf("Secrets in the controller's namespace: %d (%v), want cert-manager's CA alone", len(secrets.Items), err)
	}
	// A namespace's certificate needs etcd for its user: KeepCert alone
	// shows it is of cert-manager's CA.
	if _, err := KeepCert(ctx, c, k.ca, client.ObjectKey{Namespace: "cm-app", Name: cfg.ClientSecret}, clientRequest(ScopeUser("cm-app"), time.Hour), time.Now()); err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCert(readSecret(t, c, "cm-app", cfg.ClientSecret).Data["tls.crt"])
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil {
		t.Errorf("the namespace's certificate is not of cert-manager's CA: %v", err)
	}
}
