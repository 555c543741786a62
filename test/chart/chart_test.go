// Package chart tests the Helm chart charts/baton: it lints and renders it
// with bin/helm for its default values and each variant under values/,
// checks what the injector and the API server make of the result (a
// server-side dry-run on a real kube-apiserver, CRD first), and installs
// and upgrades it there.
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/baton-dev/baton/internal/testing/kubetest"
	"github.com/baton-dev/baton/internal/webhook"
)

const (
	root      = "../.."
	chartDir  = root + "/charts/baton"
	namespace = "baton"
)

var (
	helm       string // the helm binary
	kubeconfig string // an admin's kubeconfig for the test API server
	kube       client.Client
	env        *envtest.Environment
	skipReason string
)

func TestMain(m *testing.M) {
	err := setup()
	if err != nil {
		skipReason = kubetest.Unavailable("chart tests", err)
	}
	code := m.Run()
	if env != nil {
		env.Stop()
	}
	os.Exit(code)
}

func setup() error {
	helm = os.Getenv("HELM")
	if helm == "" {
		helm, _ = filepath.Abs(filepath.Join(root, "bin", "helm"))
	}
	if _, err := os.Stat(helm); err != nil {
		return fmt.Errorf("no helm: %w; make test builds bin/helm", err)
	}
	env = &envtest.Environment{
		// The chart's CRD first, then stand-ins for cert-manager's and the
		// Prometheus operator's.
		CRDDirectoryPaths:     []string{filepath.Join(chartDir, "crds"), filepath.Join("testdata", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := kubetest.Start(env, root)
	if err != nil {
		env = nil
		return err
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "chart-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "baton-chart")
	if err != nil {
		return err
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	if kube, err = client.New(cfg, client.Options{}); err != nil {
		return err
	}
	// The release's namespace, and Grafana's, where a variant puts the
	// dashboard.
	for _, name := range []string{namespace, "monitoring"} {
		if err := kube.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return err
		}
	}
	return nil
}

func needCluster(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// externalEtcd says whether a variant's values point at an existing etcd.
func externalEtcd(variant string) bool {
	return variant == "external-etcd-tls" || variant == "etcd-proxy"
}

// managedEtcd says whether a variant runs the chart's own etcd, secured by
// the controller.
func managedEtcd(variant string) bool {
	return !externalEtcd(variant) && variant != "insecure-etcd"
}

// variants are the values files the chart is tested with: "" is the
// defaults.
func variants(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join("values", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no variants under values/: %v", err)
	}
	return append([]string{""}, files...)
}

func name(variant string) string {
	if variant == "" {
		return "default"
	}
	return strings.TrimSuffix(filepath.Base(variant), ".yaml")
}

// run runs a command and returns its standard output; an error carries
// its standard error.
func run(t *testing.T, cmd string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(cmd), strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func render(t *testing.T, variant string, extra ...string) (string, error) {
	args := []string{"template", "baton", chartDir, "--namespace", namespace}
	if variant != "" {
		args = append(args, "-f", variant)
	}
	return run(t, helm, append(args, extra...)...)
}

// objects splits a rendering into its objects, decoded loosely.
func objects(t *testing.T, manifest string) []map[string]any {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []map[string]any
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("the rendering is not YAML: %v", err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// renderObjects renders a variant and splits it into its objects.
func renderObjects(t *testing.T, variant string) []map[string]any {
	t.Helper()
	manifest, err := render(t, variant)
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, manifest)
}

// strict decodes a rendered object (or part of one) into a typed value,
// refusing any field the type does not have.
func strict(t *testing.T, o any, into any) {
	t.Helper()
	data, _ := sigsyaml.Marshal(o)
	if err := sigsyaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%T: %v", into, err)
	}
}

func find(objs []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["kind"] == kind {
			out = append(out, o)
		}
	}
	return out
}

// component returns the objects of kind whose pods are of component (the
// label app.kubernetes.io/component of their template): etcd's
// StatefulSet and its backups' are both StatefulSets.
func component(objs []map[string]any, kind, name string) []map[string]any {
	var out []map[string]any
	for _, o := range find(objs, kind) {
		tmpl, _ := o["spec"].(map[string]any)["template"].(map[string]any)
		md, _ := tmpl["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels["app.kubernetes.io/component"] == name {
			out = append(out, o)
		}
	}
	return out
}

func TestLint(t *testing.T) {
	needCluster(t)
	for _, v := range variants(t) {
		args := []string{"lint", "--strict", chartDir}
		if v != "" {
			args = append(args, "-f", v)
		}
		if _, err := run(t, helm, args...); err != nil {
			t.Errorf("%s: %v", name(v), err)
		}
	}
}

// TestServerSideDryRun: the API server accepts every object of every
// variant, as `kubectl apply --dry-run=server` would send it.
func TestServerSideDryRun(t *testing.T) {
	needCluster(t)
	eachRendering(t, func(t *testing.T, _, manifest string) {
		file := filepath.Join(t.TempDir(), "manifest.yaml")
		if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		kubectl := filepath.Join(env.BinaryAssetsDirectory, "kubectl")
		out, err := run(t, kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", file)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out, "(server dry run)"); n != len(objects(t, manifest)) {
			t.Errorf("%d objects accepted, %d rendered:\n%s", n, len(objects(t, manifest)), out)
		}
	})
}

// TestRenderings checks what each variant must contain, and that the
// sidecar settings it renders are what the injector loads.
func TestRenderings(t *testing.T) {
	needCluster(t)
	eachRendering(t, func(t *testing.T, variant, manifest string) {
		objs := objects(t, manifest)
		deployments := find(objs, "Deployment")
		if len(deployments) != 1 {
			t.Fatalf("%d Deployments, want the controller's", len(deployments))
		}
		webhooks := find(objs, "MutatingWebhookConfiguration")
		injecting := variant != "no-injection"
		if injecting != (len(webhooks) == 1) {
			t.Fatalf("%d webhook configurations; injection on: %v", len(webhooks), injecting)
		}
		external, managed := externalEtcd(variant), managedEtcd(variant)
		if injecting {
			checkWebhook(t, webhooks[0])
			cfg := checkInjectConfig(t, objs, variant)
			if managed != (cfg.EtcdTLSSecret == "baton-etcd-client" && cfg.EtcdClientCert) {
				t.Errorf("injected sidecars' etcd credentials %q (client certificate %v) with the chart's secured etcd %v", cfg.EtcdTLSSecret, cfg.EtcdClientCert, managed)
			}
			checkProxy(t, objs, cfg, variant == "etcd-proxy")
		}
		// With cert-manager, it keeps etcd's CA and certificate.
		var etcdCerts []string
		for _, c := range find(objs, "Certificate") {
			if name := c["metadata"].(map[string]any)["name"].(string); strings.Contains(name, "etcd") {
				etcdCerts = append(etcdCerts, name)
			}
		}
		if want := variant == "cert-manager"; want != (len(etcdCerts) == 2) {
			t.Errorf("cert-manager Certificates for etcd: %v", etcdCerts)
		}
		if sts := component(objs, "StatefulSet", "etcd"); external == (len(sts) == 1) {
			t.Errorf("%d etcd StatefulSets with external etcd %v", len(sts), external)
		}
		etcd := "baton-etcd"
		if variant == "scheduling" { // nameOverride: locks
			etcd = "baton-locks-etcd"
		}
		checkBackups(t, objs, etcd, external, managed)
		args := fmt.Sprint(deployments[0])
		for want, on := range map[string]bool{
			"--etcd-endpoints=https://" + etcd + ".baton.svc:2379": managed,
			"--etcd-endpoints=http://" + etcd + ".baton.svc:2379":  !external && !managed,
			"--etcd-ca-secret=" + etcd + "-ca":                     managed,
			"--etcd-server-secret=" + etcd + "-tls":                managed && variant != "cert-manager",
			"--etcd-ca-external":                                   managed && variant == "cert-manager",
			"--etcd-cacert=/etc/baton/etcd-tls/ca.crt":             external,
			"--inject-config=/etc/baton/inject/config.yaml":        injecting,
			"--etcd-maintenance ":                                  !external,
			"--etcd-members=" + etcd + "-0=":                       !external,
		} {
			if strings.Contains(args, want) != on {
				t.Errorf("controller %s: %v, want %v", want, !on, on)
			}
		}
	})
}

func checkWebhook(t *testing.T, o map[string]any) {
	t.Helper()
	var cfg admissionregv1.MutatingWebhookConfiguration
	strict(t, o, &cfg)
	w := cfg.Webhooks[0]
	if w.ClientConfig.Service == nil || *w.ClientConfig.Service.Path != webhook.Path {
		t.Errorf("webhook path %+v, want %s", w.ClientConfig.Service, webhook.Path)
	}
	if w.ObjectSelector == nil || w.ObjectSelector.MatchLabels[webhook.LabelInject] != "true" {
		t.Errorf("object selector %+v: only pods labelled %s=true may reach the injector", w.ObjectSelector, webhook.LabelInject)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregv1.OperationType{admissionregv1.Create}) || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) {
		t.Errorf("rules %+v, want pods on create", w.Rules)
	}
	if cfg.Annotations["cert-manager.io/inject-ca-from"] == "" && len(w.ClientConfig.CABundle) == 0 {
		t.Error("no caBundle and no cert-manager CA injection: the API server could not trust the webhook")
	}
}

// checkInjectConfig loads the rendered inject ConfigMap as the controller
// does.
func checkInjectConfig(t *testing.T, objs []map[string]any, variant string) webhook.Config {
	t.Helper()
	var text string
	for _, o := range find(objs, "ConfigMap") {
		if data, ok := o["data"].(map[string]any); ok && data["config.yaml"] != nil {
			text, _ = data["config.yaml"].(string)
		}
	}
	if text == "" {
		t.Fatal("no ConfigMap with the injector's config.yaml")
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(file, []byte(text), 0o600)
	cfg, err := webhook.Load(file)
	if err != nil {
		t.Fatalf("the injector refuses the chart's config: %v\n%s", err, text)
	}
	if cfg.Image != "ghcr.io/baton-dev/baton:0.1.0" {
		t.Errorf("image %q, want the chart's appVersion", cfg.Image)
	}
	if pull := []string{"registry"}; variant == "scheduling" && !slices.Equal(cfg.ImagePullSecrets, pull) {
		t.Errorf("the injected pods' pull secrets %v, want %v", cfg.ImagePullSecrets, pull)
	}
	if variant == "cert-manager" && (cfg.LeaseTTL.Duration != 30*time.Second || cfg.MetricsPort != 9811 || !slices.Equal(cfg.Args, []string{"--default-ttl=10m"}) ||
		!slices.Equal(cfg.DaprStores, []string{"name=lockstore,prefix=team-a/dapr,keyPrefix=name"}) || cfg.ClusterName != "east") {
		t.Errorf("the variant's sidecar settings did not arrive: %+v", cfg)
	}
	return cfg
}

// TestBadValuesAreRefused: values.schema.json names what is wrong.
func TestBadValuesAreRefused(t *testing.T) {
	needCluster(t)
	for set, want := range map[string]string{
		"etcd.replicas=2":                                               "etcd.replicas",
		"etcd.secure=maybe":                                             "etcd.secure",
		"etcd.certValidity=monthly":                                     "etcd.certValidity",
		"sidecar.leaseTTL=soon":                                         "sidecar.leaseTTL",
		"webhook.failurePolicy=Sometimes":                               "webhook.failurePolicy",
		"etcd.endpoints={etcd:2379}":                                    "etcd.endpoints",
		"controller.replicas=0":                                         "controller.replicas",
		"sidecar.healthPort=70000":                                      "sidecar.healthPort",
		"sidecar.args={default-ttl}":                                    "sidecar.args",
		"sidecar.daprStores={prefix=x}":                                 "sidecar.daprStores",
		"clusterName=East_1":                                            "clusterName",
		"etcd.proxy.enabled=true":                                       "etcd.proxy.enabled with the chart's secured etcd",
		"etcd.proxy.port=0":                                             "etcd.proxy.port",
		"prometheusRule.ttlUsedRatio=1.5":                               "prometheusRule.ttlUsedRatio",
		"etcd.tsl.secretName=x":                                         "tsl",
		"nameOverride=Locks":                                            "nameOverride",
		"etcd.priorityClassName=High":                                   "etcd.priorityClassName",
		"sidecar.imagePullSecrets[0]=a b":                               "sidecar.imagePullSecrets",
		"sidecar.podMonitor.enabled=true":                               "sidecar.podMonitor.enabled needs sidecar.metricsPort",
		"controller.topologySpreadConstraints[0].maxSkew=1":             "controller.topologySpreadConstraints",
		"prometheusRule.enabled=true":                                   "prometheusRule.enabled needs sidecar.metricsPort",
		"etcd.podMonitor.enabled=true,etcd.endpoints={http://e:2379}":   "etcd.podMonitor.enabled scrapes the chart's own etcd",
		"etcd.backup.podMonitor.enabled=true,etcd.backup.enabled=false": "etcd.backup.podMonitor.enabled scrapes the backups of the chart's own etcd",
		"etcd.quota=2147483648":                                         "keep it at least twice etcd.quota",
		"etcd.history=0s":                                               "etcd.history 0s",
		"etcd.history=ten":                                              "etcd.history",
		"etcd.maintenance.defragFreeRatio=1":                            "etcd.maintenance.defragFreeRatio",
	} {
		_, err := render(t, "", "--set", set)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want an error naming %s", set, err, want)
		}
	}
}

// TestInstallAndUpgrade: helm install and upgrade against the API server;
// the generated CA and serving certificate survive the upgrade, the webhook
// still trusts them, and the controller's RBAC allows what it does.
func TestInstallAndUpgrade(t *testing.T) {
	needCluster(t)
	helmArgs := func(verb string) []string {
		return []string{verb, "certs", chartDir, "--namespace", namespace, "--kubeconfig", kubeconfig, "--set", "etcd.replicas=1"}
	}
	if _, err := run(t, helm, helmArgs("install")...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run(t, helm, "uninstall", "certs", "--namespace", namespace, "--kubeconfig", kubeconfig) })
	secret := func() *corev1.Secret {
		var s corev1.Secret
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "certs-baton-webhook-tls"}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	before := secret()
	if len(before.Data["ca.crt"]) == 0 || len(before.Data["tls.key"]) == 0 {
		t.Fatalf("the webhook secret has no CA or key: %v", before.Data)
	}
	if _, err := run(t, helm, append(helmArgs("upgrade"), "--set", "sidecar.leaseTTL=20s")...); err != nil {
		t.Fatal(err)
	}
	after := secret()
	if !bytes.Equal(before.Data["ca.crt"], after.Data["ca.crt"]) || !bytes.Equal(before.Data["tls.crt"], after.Data["tls.crt"]) {
		t.Error("the upgrade replaced the webhook's certificate")
	}
	var hook admissionregv1.MutatingWebhookConfiguration
	if err := kube.Get(context.Background(), client.ObjectKey{Name: "certs-baton-inject"}, &hook); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hook.Webhooks[0].ClientConfig.CABundle, after.Data["ca.crt"]) {
		t.Error("the webhook's caBundle is not the secret's CA")
	}

	// The controller's ServiceAccount may do what the controller does (the
	// API server authorizes with RBAC), and not more.
	kubectl := filepath.Join(env.BinaryAssetsDirectory, "kubectl")
	sa := "system:serviceaccount:" + namespace + ":certs-baton-controller"
	for _, c := range []struct {
		verb, resource, namespace string
		want                      bool
	}{
		{"create", "locks.baton.dev", "team-a", true},
		{"delete", "locks.baton.dev", "team-b", true},
		{"update", "locks.baton.dev/status", "team-a", true},
		{"create", "leases.coordination.k8s.io", namespace, true},
		{"create", "events.events.k8s.io", "team-a", true},
		{"get", "secrets", namespace, false},
		{"create", "pods", "team-a", false},
		// The chart's etcd's member pods, by name, in its namespace only.
		{"patch", "pods/certs-baton-etcd-0", namespace, true},
		{"get", "pods/certs-baton-etcd-0", namespace, true},
		{"list", "pods", namespace, true},
		{"patch", "pods/certs-baton-controller-x", namespace, false},
		{"patch", "pods/certs-baton-etcd-0", "team-a", false},
		{"delete", "pods/certs-baton-etcd-0", namespace, false},
		// The owner of the Lock objects, by name only.
		{"get", "clusterroles.rbac.authorization.k8s.io/certs-baton-controller", "", true},
		{"get", "clusterroles.rbac.authorization.k8s.io/certs-baton-view", "", false},
		{"list", "clusterroles.rbac.authorization.k8s.io", "", false},
	} {
		resource, sub, _ := strings.Cut(c.resource, "/")
		if sub != "status" { // a name
			resource, sub = c.resource, ""
		}
		args := []string{"--kubeconfig", kubeconfig, "auth", "can-i", c.verb, resource, "--as", sa}
		if c.namespace != "" {
			args = append(args, "--namespace", c.namespace)
		}
		if sub != "" {
			args = append(args, "--subresource", sub)
		}
		out, err := run(t, kubectl, args...)
		// can-i answers "no" with exit status 1.
		if got := strings.TrimSpace(out) == "yes"; got != c.want || (err != nil && strings.TrimSpace(out) != "no") {
			t.Errorf("can the controller %s %s in %s? %q %v; want %v", c.verb, c.resource, c.namespace, out, err, c.want)
		}
	}
	// The Secrets of the chart's secured etcd, by name only.
	for _, c := range []struct {
		verb, secret, namespace string
		want                    bool
	}{
		{"get", "certs-baton-etcd-ca", namespace, true},
		{"update", "certs-baton-etcd-tls", namespace, true},
		{"get", "baton-etcd-client", "team-a", true},
		{"update", "baton-etcd-client", "team-a", true},
		{"get", "app-credentials", "team-a", false},
		{"list", "", "team-a", false},
	} {
		out, _ := run(t, kubectl, "--kubeconfig", kubeconfig, "auth", "can-i", c.verb, strings.TrimSuffix("secrets/"+c.secret, "/"), "--namespace", c.namespace, "--as", sa)
		if got := strings.TrimSpace(out) == "yes"; got != c.want {
			t.Errorf("can the controller %s secret %q in %s? %q; want %v", c.verb, c.secret, c.namespace, out, c.want)
		}
	}
	// An upgrade cannot switch the running etcd between http and https.
	if _, err := run(t, helm, append(helmArgs("upgrade"), "--set", "etcd.secure=false")...); err == nil || !strings.Contains(err.Error(), "etcd.secure=false") {
		t.Errorf("an upgrade turning TLS off a running etcd: %v, want refused naming etcd.secure", err)
	}
	// Nor change its number of members.
	if _, err := run(t, helm, append(helmArgs("upgrade"), "--set", "etcd.replicas=5")...); err == nil || !strings.Contains(err.Error(), "etcd.replicas 5: the running etcd (StatefulSet certs-baton-etcd) has 1") {
		t.Errorf("an upgrade changing the running etcd's members: %v, want refused naming etcd.replicas", err)
	}
}

// eachRendering runs f, as a subtest, on the chart rendered with each
// variant's values.
func eachRendering(t *testing.T, f func(t *testing.T, variant, manifest string)) {
	for _, v := range variants(t) {
		t.Run(name(v), func(t *testing.T) {
			manifest, err := render(t, v)
			if err != nil {
				t.Fatal(err)
			}
			f(t, name(v), manifest)
		})
	}
}

// TestLeaseTTLBoundsMatchTheSidecar: the schema accepts exactly the lease
// TTLs the injector and the sidecar accept (2s to 10m), so that a value
// helm installs is never one every injected pod then refuses.
func TestLeaseTTLBoundsMatchTheSidecar(t *testing.T) {
	needCluster(t)
	for _, v := range []string{"1s", "1999ms", "2s", "2000ms", "30s", "90s", "600s", "601s", "1m", "1m30s", "9m59s",
		"10m", "10m0s", "10m1s", "11m", "1h", "599999ms", "600000ms", "600001ms", "0s", "soon", "-5s"} {
		_, err := render(t, "", "--set", "sidecar.leaseTTL="+v)
		schemaOK := err == nil
		cfg := webhook.Default()
		cfg.Image, cfg.EtcdEndpoints = "baton:test", []string{"http://etcd:2379"}
		d, perr := time.ParseDuration(v)
		cfg.LeaseTTL = metav1.Duration{Duration: d}
		sidecarOK := perr == nil && cfg.Validate() == nil
		if schemaOK != sidecarOK {
			t.Errorf("sidecar.leaseTTL=%s: the schema accepts it: %v (%v); the injector: %v", v, schemaOK, err, sidecarOK)
		}
	}
}

// TestSchedulingKnobs: the pod-level values reach the controller's and
// etcd's pod templates, and a spread constraint with no labelSelector gets
// its component's.
func TestSchedulingKnobs(t *testing.T) {
	needCluster(t)
	objs := renderObjects(t, filepath.Join("values", "scheduling.yaml"))
	for _, o := range objs {
		if md, _ := o["metadata"].(map[string]any); !strings.HasPrefix(fmt.Sprint(md["name"]), "baton-locks-") {
			t.Errorf("%s %v: want a name from nameOverride", o["kind"], md["name"])
		}
	}
	workloads := append(find(objs, "Deployment"), component(objs, "StatefulSet", "etcd")...)
	if len(workloads) != 2 {
		t.Fatalf("%d workloads, want the controller's and etcd's", len(workloads))
	}
	for _, o := range workloads {
		var tmpl corev1.PodTemplateSpec
		strict(t, o["spec"].(map[string]any)["template"], &tmpl)
		what, spec := fmt.Sprint(o["kind"]), tmpl.Spec
		component := tmpl.Labels["app.kubernetes.io/component"]
		if tmpl.Labels["team"] != "platform" || tmpl.Labels["app.kubernetes.io/name"] != "locks" || tmpl.Annotations["example.com/owner"] != "platform" {
			t.Errorf("%s pod labels %v annotations %v", what, tmpl.Labels, tmpl.Annotations)
		}
		if spec.PriorityClassName != "system-cluster-critical" {
			t.Errorf("%s priorityClassName %q", what, spec.PriorityClassName)
		}
		if !slices.Equal(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry"}}) {
			t.Errorf("%s imagePullSecrets %v", what, spec.ImagePullSecrets)
		}
		if c := spec.TopologySpreadConstraints; len(c) != 1 || c[0].TopologyKey != "topology.kubernetes.io/zone" || c[0].LabelSelector == nil ||
			c[0].LabelSelector.MatchLabels["app.kubernetes.io/component"] != component || c[0].LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "baton" {
			t.Errorf("%s topologySpreadConstraints %+v, want the zone spread over the %s pods", what, c, component)
		}
	}
	if manifest, err := render(t, "", "--set", "fullnameOverride=team-locks"); err != nil || !strings.Contains(manifest, "name: team-locks-controller\n") || strings.Contains(manifest, "name: baton-controller") {
		t.Errorf("fullnameOverride: %v", err)
	}
}

// TestMonitors: the ServiceMonitor and PodMonitor decode strictly as the
// Prometheus operator's own types, and the PodMonitor scrapes the port the
// injector names on the sidecars it injects.
func TestMonitors(t *testing.T) {
	needCluster(t)
	objs := renderObjects(t, filepath.Join("values", "cert-manager.yaml"))
	sms, pms := find(objs, "ServiceMonitor"), find(objs, "PodMonitor")
	if len(sms) != 1 || len(pms) != 3 {
		t.Fatalf("%d ServiceMonitors and %d PodMonitors, want one and three (the sidecars', etcd's, the backups')", len(sms), len(pms))
	}
	checkPodMonitor(t, objs, pms, "baton-etcd", "etcd", "baton-etcd")
	checkPodMonitor(t, objs, pms, "baton-etcd-backup", "etcd-backup", "baton-etcd-backup")
	var sm monitoringv1.ServiceMonitor
	strict(t, sms[0], &sm)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor %+v", sm.Spec)
	}
	var pm monitoringv1.PodMonitor
	for _, o := range pms {
		if o["metadata"].(map[string]any)["name"] == "baton-sidecars" {
			strict(t, o, &pm)
		}
	}
	cfg := webhook.Default()
	cfg.Image, cfg.EtcdEndpoints, cfg.MetricsPort = "baton:test", []string{"http://etcd:2379"}, 9811
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{webhook.LabelInject: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := webhook.Inject(pod, cfg); err != nil {
		t.Fatal(err)
	}
	ports := pod.Spec.InitContainers[0].Ports
	if e := pm.Spec.PodMetricsEndpoints; len(e) != 1 || e[0].Port == nil || !slices.ContainsFunc(ports, func(p corev1.ContainerPort) bool { return p.Name == *e[0].Port }) {
		t.Errorf("PodMonitor endpoints %+v; the injected sidecar's ports are %+v", e, ports)
	}
	if sel := pm.Spec.Selector.MatchLabels; sel[webhook.LabelInject] != "true" || !pm.Spec.NamespaceSelector.Any || pm.Labels["release"] != "prometheus" {
		t.Errorf("PodMonitor selects %v in %+v, labels %v", sel, pm.Spec.NamespaceSelector, pm.Labels)
	}
}

// checkPodMonitor: the PodMonitor name scrapes the metrics port of the
// StatefulSet of component comp, as job (the job its alerts select), and
// selects that StatefulSet's pods.
func checkPodMonitor(t *testing.T, objs, pms []map[string]any, name, comp, job string) {
	t.Helper()
	var pm monitoringv1.PodMonitor
	for _, o := range pms {
		if o["metadata"].(map[string]any)["name"] == name {
			strict(t, o, &pm)
		}
	}
	var sts appsv1.StatefulSet
	sets := component(objs, "StatefulSet", comp)
	if len(sets) != 1 {
		t.Fatalf("%d StatefulSets of component %s, want one", len(sets), comp)
	}
	strict(t, sets[0], &sts)
	e := pm.Spec.PodMetricsEndpoints
	if len(e) != 1 || e[0].Port == nil || len(e[0].RelabelConfigs) != 1 || e[0].RelabelConfigs[0].Replacement == nil || *e[0].RelabelConfigs[0].Replacement != job {
		t.Fatalf("%s's PodMonitor endpoints %+v, want one relabelled job %s", comp, e, job)
	}
	if !slices.ContainsFunc(sts.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == *e[0].Port }) {
		t.Errorf("%s's PodMonitor scrapes port %q, which its container does not name", comp, *e[0].Port)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if sts.Spec.Template.Labels[k] != v {
			t.Errorf("%s's PodMonitor selects %v, not its pods (%v)", comp, pm.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
		}
	}
}

// TestNotesTellTheEtcdAsInstalled: the notes helm prints after an install
// describe the etcd the values give: TLS with client certificates and a
// user per namespace by default, plain HTTP only with etcd.secure=false.
func TestNotesTellTheEtcdAsInstalled(t *testing.T) {
	for _, c := range []struct {
		set          []string
		want, refuse string
	}{
		{nil, "https://notes-baton-etcd.baton-system.svc:2379: TLS with client\ncertificates of a CA the controller keeps in the Secret notes-baton-etcd-ca", "plain HTTP"},
		{[]string{"--set", "certManager.enabled=true"}, "certificates of cert-manager's CA", "plain HTTP"},
		{[]string{"--set", "etcd.secure=false"}, "http://notes-baton-etcd.baton-system.svc:2379: plain HTTP\nwithout authentication", "TLS"},
	} {
		out, err := run(t, helm, append([]string{"install", "notes", chartDir, "--namespace", "baton-system", "--dry-run=client"}, c.set...)...)
		if err != nil {
			t.Fatal(err)
		}
		at := strings.Index(out, "NOTES:")
		if at < 0 {
			t.Fatalf("%v: helm printed no notes:\n%s", c.set, out)
		}
		notes := out[at:]
		if !strings.Contains(notes, c.want) || strings.Contains(notes, c.refuse) {
			t.Errorf("%v: notes\n%s\nwant %q, not %q", c.set, notes, c.want, c.refuse)
		}
	}
}

// TestAntiAffinityFollowsTheNodes: with etcd.antiAffinity auto, helm
// install against a cluster with as many Ready, schedulable, untainted
// nodes as etcd members makes them require distinct nodes; with fewer, it
// lets them share and the notes say what that risks.
func TestAntiAffinityFollowsTheNodes(t *testing.T) {
	needCluster(t)
	kubectl := filepath.Join(env.BinaryAssetsDirectory, "kubectl")
	install := func(set ...string) (manifest, notes string) {
		t.Helper()
		out, err := run(t, helm, append([]string{"install", "spread", chartDir, "--namespace", namespace, "--kubeconfig", kubeconfig, "--dry-run=server"}, set...)...)
		if err != nil {
			t.Fatal(err)
		}
		at := strings.Index(out, "NOTES:")
		if at < 0 {
			t.Fatalf("no notes:\n%s", out)
		}
		return out[:at], out[at:]
	}
	check := func(when string, hard bool, note string, set ...string) {
		t.Helper()
		manifest, notes := install(set...)
		if strings.Contains(manifest, "requiredDuringSchedulingIgnoredDuringExecution") != hard {
			t.Errorf("%s: members require distinct nodes: %v, want %v", when, !hard, hard)
		}
		if strings.Contains(notes, "etcd's members may share a node") == hard || !strings.Contains(notes, note) {
			t.Errorf("%s: notes\n%s\nwant %q", when, notes, note)
		}
	}
	check("no nodes", false, "this cluster has 0 schedulable nodes for 3 members")
	for i := range 3 {
		name := fmt.Sprintf("spread-%d", i)
		node := fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":%q}}`, name)
		file := filepath.Join(t.TempDir(), "node.json")
		os.WriteFile(file, []byte(node), 0o600)
		if _, err := run(t, kubectl, "--kubeconfig", kubeconfig, "apply", "-f", file); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { run(t, kubectl, "--kubeconfig", kubeconfig, "delete", "node", name) })
		if _, err := run(t, kubectl, "--kubeconfig", kubeconfig, "patch", "node", name, "--subresource=status", "--type=merge",
			"-p", `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`); err != nil {
			t.Fatal(err)
		}
		// The API server taints a new node not-ready; the node lifecycle
		// controller, which envtest does not run, lifts it once Ready.
		if _, err := run(t, kubectl, "--kubeconfig", kubeconfig, "taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-"); err != nil {
			t.Fatal(err)
		}
	}
	check("three Ready nodes", true, "")
	if _, err := run(t, kubectl, "--kubeconfig", kubeconfig, "taint", "node", "spread-2", "dedicated=db:NoSchedule"); err != nil {
		t.Fatal(err)
	}
	check("one of them tainted", false, "this cluster has 2 schedulable nodes for 3 members")
	check("one of them tainted, etcd tolerating it", true, "", "--set", "etcd.tolerations[0].key=dedicated,etcd.tolerations[0].value=db,etcd.tolerations[0].effect=NoSchedule")
	if _, err := run(t, kubectl, "--kubeconfig", kubeconfig, "label", "node", "spread-0", "spread-1", "disk=ssd"); err != nil {
		t.Fatal(err)
	}
	check("two nodes labelled as etcd's nodeSelector asks", false, "this cluster has 2 schedulable nodes for 3 members",
		"--set", "etcd.nodeSelector.disk=ssd,etcd.tolerations[0].operator=Exists")
}
