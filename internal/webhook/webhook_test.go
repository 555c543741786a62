package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/baton-dev/baton/internal/testing/kubetest"
)

// The webhook tests share one real kube-apiserver with the injector
// registered as a mutating webhook, served by a controller-runtime webhook
// server in this process.
var (
	kube       client.Client
	skipReason string
)

func TestMain(m *testing.M) {
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		MutatingWebhooks: []*admissionregv1.MutatingWebhookConfiguration{webhookConfiguration()},
	}}
	stop, err := startInjector(env)
	if err != nil {
		skipReason = kubetest.Unavailable("inject tests: no kube-apiserver", err)
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// webhookConfiguration is the injector's registration as the chart makes
// it: pods labelled baton.dev/inject=true, on create, failing closed.
func webhookConfiguration() *admissionregv1.MutatingWebhookConfiguration {
	path := strings.TrimPrefix(Path, "/") // envtest puts a slash between host and path
	fail, none, ifNeeded := admissionregv1.Fail, admissionregv1.SideEffectClassNone, admissionregv1.IfNeededReinvocationPolicy
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "baton-inject"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:         "inject.baton.dev",
			ClientConfig: admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{Namespace: "baton", Name: "baton-webhook", Path: &path}},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{LabelInject: "true"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &ifNeeded,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// startInjector starts the API server and a manager serving the injector.
func startInjector(env *envtest.Environment) (stop func(), err error) {
	cfg, err := kubetest.Start(env, filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	stopEnv := func() { env.Stop() }
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		stopEnv()
		return nil, err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	wio := &env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:        scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: crwebhook.NewServer(crwebhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	if err != nil {
		stopEnv()
		return nil, err
	}
	inj, err := NewInjector(testConfig(), scheme)
	if err != nil {
		stopEnv()
		return nil, err
	}
	inj.Register(mgr.GetWebhookServer())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = func() { cancel(); <-done; stopEnv() }
	addr := net.JoinHostPort(wio.LocalServingHost, fmt.Sprint(wio.LocalServingPort))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("webhook server on %s: %w", addr, err)
		}
	}
	if kube, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("no kube-apiserver: " + skipReason)
	}
}

// create creates pod in the namespace default and returns it as stored.
func create(t *testing.T, pod *corev1.Pod) (*corev1.Pod, error) {
	t.Helper()
	pod = pod.DeepCopy()
	pod.Namespace = "default"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kube.Create(ctx, pod); err != nil {
		return nil, err
	}
	t.Cleanup(func() { kube.Delete(context.Background(), pod) })
	return pod, nil
}

func TestAdmissionInjectsLabelledPods(t *testing.T) {
	needAPIServer(t)
	in := appPod(map[string]string{AnnotationLeaseTTL: "20s"})
	in.Name = "labelled"
	got, err := create(t, in)
	if err != nil {
		t.Fatal(err)
	}
	want := in.DeepCopy()
	if err := Inject(want, testConfig()); err != nil {
		t.Fatal(err)
	}
	if n := names(got.Spec.InitContainers); !slices.Equal(n, []string{ContainerName, "migrate"}) {
		t.Fatalf("init containers %v: want the sidecar first", n)
	}
	sc, wsc := got.Spec.InitContainers[0], want.Spec.InitContainers[0]
	// Inject spells out what the API server would default, so the stored
	// sidecar is exactly the specified one.
	if !equality.Semantic.DeepEqual(sc, wsc) || !slices.Contains(sc.Args, "--lease-ttl=20s") {
		t.Errorf("the stored sidecar is not the one specified:\n got %+v\nwant %+v", sc, wsc)
	}
	for _, c := range append(got.Spec.Containers, got.Spec.InitContainers[1]) {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == VolumeName && m.MountPath == SocketDir }) || env(&c, EnvSocket) == nil {
			t.Errorf("container %s: mounts %+v env %+v, want the socket and %s", c.Name, c.VolumeMounts, c.Env, EnvSocket)
		}
	}
	// Re-admission: a pod made from the injected spec comes back as it went.
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "again", Labels: got.Labels, Annotations: got.Annotations}, Spec: *got.Spec.DeepCopy()}
	stored, err := create(t, again)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(stored.Spec.InitContainers, got.Spec.InitContainers) || !equality.Semantic.DeepEqual(stored.Spec.Containers, got.Spec.Containers) ||
		!equality.Semantic.DeepEqual(stored.Spec.Volumes, got.Spec.Volumes) {
		t.Errorf("re-admission changed the pod:\n got %+v\nwant %+v", stored.Spec, got.Spec)
	}
}

func TestAdmissionLeavesOtherPodsAlone(t *testing.T) {
	needAPIServer(t)
	for name, labels := range map[string]map[string]string{"unlabelled": nil, "labelled-false": {LabelInject: "false"}} {
		in := appPod(nil)
		in.Name, in.Labels = name, labels
		got, err := create(t, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.InitContainers) != 1 || len(got.Spec.Volumes) != 0 || env(&got.Spec.Containers[0], EnvSocket) != nil {
			t.Errorf("%s: the pod was changed: %+v", name, got.Spec)
		}
	}
}

func TestAdmissionRefusesBadOverrides(t *testing.T) {
	needAPIServer(t)
	in := appPod(map[string]string{AnnotationMemoryLimit: "lots"})
	in.Name = "bad-override"
	_, err := create(t, in)
	if err == nil {
		t.Fatal("created; want the webhook to refuse it")
	}
	for _, w := range []string{"denied the request", AnnotationMemoryLimit, `"lots"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// TestAdmissionDaprPod: through the API server, a pod annotated
// baton.dev/dapr is stored with the sidecar of Dapr pods (/baton-dapr on
// daprd's ports, the app id of dapr.io/app-id) and the SDKs' environment.
func TestAdmissionDaprPod(t *testing.T) {
	needAPIServer(t)
	in := appPod(map[string]string{AnnotationDapr: "true", AnnotationDaprIOAppID: "orders"})
	in.Name = "dapr-app"
	got, err := create(t, in)
	if err != nil {
		t.Fatal(err)
	}
	sc := got.Spec.InitContainers[0]
	if !slices.Equal(sc.Command, []string{DaprBinary}) || !slices.Contains(sc.Args, "--dapr-app-id=orders") || !slices.Contains(sc.Args, "--dapr-http-addr=127.0.0.1:3500") {
		t.Errorf("the stored sidecar runs %q %q; want %s with Dapr's API for app orders", sc.Command, sc.Args, DaprBinary)
	}
	if e := env(&got.Spec.Containers[0], "DAPR_GRPC_PORT"); e == nil || e.Value != "50001" {
		t.Errorf("the app's DAPR_GRPC_PORT: %+v", e)
	}
	bad := appPod(map[string]string{AnnotationDapr: "on"})
	bad.Name = "dapr-bad"
	if _, err := create(t, bad); err == nil || !strings.Contains(err.Error(), `annotation baton.dev/dapr "on": want true or false`) {
		t.Errorf("a bad baton.dev/dapr: %v; want the webhook to refuse it saying why", err)
	}
}
