package webhook

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testConfig() Config {
	c := Default()
	c.Image = "ghcr.io/baton-dev/baton:test"
	c.EtcdEndpoints = []string{"http://etcd-0.etcd:2379", "http://etcd-1.etcd:2379"}
	return c
}

func appPod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a", Labels: map[string]string{LabelInject: "true"}, Annotations: annotations},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "migrate", Image: "app"}},
			Containers: []corev1.Container{
				{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}},
				{Name: "worker", Image: "app", Env: []corev1.EnvVar{{Name: EnvSocket, Value: "/elsewhere.sock"}}},
			},
		},
	}
}

func container(list []corev1.Container, name string) *corev1.Container {
	i := slices.IndexFunc(list, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return &list[i]
}

func env(c *corev1.Container, name string) *corev1.EnvVar {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return nil
	}
	return &c.Env[i]
}

func TestInjectAddsANativeSidecar(t *testing.T) {
	pod := appPod(nil)
	if err := Inject(pod, testConfig()); err != nil {
		t.Fatal(err)
	}
	spec := pod.Spec
	if len(spec.InitContainers) != 2 || spec.InitContainers[0].Name != ContainerName {
		t.Fatalf("init containers %v: want the sidecar first, then migrate", names(spec.InitContainers))
	}
	sc := spec.InitContainers[0]
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("restartPolicy %v: a native sidecar needs Always", sc.RestartPolicy)
	}
	wantArgs := []string{"serve", "--socket=/var/run/baton/baton.sock", "--health-addr=:9810",
		"--etcd-endpoints=http://etcd-0.etcd:2379,http://etcd-1.etcd:2379", "--lease-ttl=10s"}
	if !slices.Equal(sc.Args, wantArgs) || sc.Image != "ghcr.io/baton-dev/baton:test" {
		t.Errorf("image %s args %q, want %q", sc.Image, sc.Args, wantArgs)
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "NODE_NAME": "spec.nodeName", "BATON_SERVICE_ACCOUNT": "spec.serviceAccountName"} {
		e := env(&sc, name)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s: %+v, want the downward API's %s", name, e, path)
		}
	}
	for _, p := range []*corev1.Probe{sc.StartupProbe, sc.ReadinessProbe, sc.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "baton-health" {
			t.Fatalf("probe %+v: want an HTTP probe on the health port", p)
		}
	}
	if sc.StartupProbe.HTTPGet.Path != "/readyz" || sc.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("startup probe %s, liveness %s", sc.StartupProbe.HTTPGet.Path, sc.LivenessProbe.HTTPGet.Path)
	}
	if q := sc.Resources.Requests[corev1.ResourceMemory]; q.String() != "64Mi" {
		t.Errorf("memory request %s, want the default 64Mi", q.String())
	}
	if i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName }); i < 0 || spec.Volumes[i].EmptyDir == nil {
		t.Errorf("volumes %+v: want an emptyDir %s", spec.Volumes, VolumeName)
	}
	for _, c := range []*corev1.Container{&sc, container(spec.InitContainers, "migrate"), container(spec.Containers, "app"), container(spec.Containers, "worker")} {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == VolumeName && m.MountPath == SocketDir }) {
			t.Errorf("container %s mounts %+v: want %s at %s", c.Name, c.VolumeMounts, VolumeName, SocketDir)
		}
	}
	if e := env(container(spec.Containers, "app"), EnvSocket); e == nil || e.Value != SocketPath {
		t.Errorf("app's %s: %+v, want %s", EnvSocket, e, SocketPath)
	}
	if e := env(container(spec.Containers, "worker"), EnvSocket); e.Value != "/elsewhere.sock" {
		t.Errorf("worker's own %s was changed to %s", EnvSocket, e.Value)
	}
	if env(&sc, EnvSocket) != nil {
		t.Error("the sidecar got BATON_SOCKET, which is for its clients")
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestInjectIsIdempotent(t *testing.T) {
	pod := appPod(map[string]string{AnnotationLeaseTTL: "30s"})
	if err := Inject(pod, testConfig()); err != nil {
		t.Fatal(err)
	}
	again := pod.DeepCopy()
	if err := Inject(again, testConfig()); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(pod, again) {
		t.Errorf("a second injection changed the pod:\n%+v\n%+v", pod.Spec, again.Spec)
	}
	// A container another webhook added since gets the socket, and only it
	// changes.
	again.Spec.Containers = append(again.Spec.Containers, corev1.Container{Name: "late", Image: "x"})
	if err := Inject(again, testConfig()); err != nil {
		t.Fatal(err)
	}
	if late := container(again.Spec.Containers, "late"); len(late.VolumeMounts) != 1 || env(late, EnvSocket) == nil {
		t.Errorf("late container %+v: want the socket mount and %s", late, EnvSocket)
	}
	if len(again.Spec.InitContainers) != 2 || len(again.Spec.Volumes) != 1 {
		t.Errorf("reinvocation added a second sidecar or volume: %v, %d volumes", names(again.Spec.InitContainers), len(again.Spec.Volumes))
	}
}

func TestAnnotationsOverride(t *testing.T) {
	pod := appPod(map[string]string{
		AnnotationLeaseTTL: "45s", AnnotationCPURequest: "50m", AnnotationCPULimit: "1",
		AnnotationMemoryRequest: "64Mi", AnnotationMemoryLimit: "256Mi", "example.com/other": "kept",
	})
	if err := Inject(pod, testConfig()); err != nil {
		t.Fatal(err)
	}
	sc := pod.Spec.InitContainers[0]
	if !slices.Contains(sc.Args, "--lease-ttl=45s") {
		t.Errorf("args %q: want --lease-ttl=45s", sc.Args)
	}
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	if !equality.Semantic.DeepEqual(sc.Resources, want) {
		t.Errorf("resources %+v, want %+v", sc.Resources, want)
	}
}

func TestBadPodsAreRefusedSayingWhy(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*corev1.Pod)
		want   []string
	}{
		{"lease TTL not a duration", annotate(AnnotationLeaseTTL, "soon"), []string{AnnotationLeaseTTL, `"soon"`, "30s"}},
		{"lease TTL too short", annotate(AnnotationLeaseTTL, "1s"), []string{AnnotationLeaseTTL, "2s"}},
		{"lease TTL too long", annotate(AnnotationLeaseTTL, "1h"), []string{AnnotationLeaseTTL, "10m"}},
		{"bad quantity", annotate(AnnotationMemoryLimit, "lots"), []string{AnnotationMemoryLimit, `"lots"`, "64Mi"}},
		{"negative quantity", annotate(AnnotationCPURequest, "-1"), []string{AnnotationCPURequest, "positive"}},
		{"request above limit", annotate(AnnotationMemoryRequest, "1Gi"), []string{"memory request 1Gi", "limit 128Mi"}},
		{"misspelt annotation", annotate("baton.dev/lease-tll", "30s"), []string{"baton.dev/lease-tll", "no such setting", AnnotationLeaseTTL}},
		{"container named baton", func(p *corev1.Pod) { p.Spec.Containers[0].Name = ContainerName }, []string{"container named baton", "rename"}},
		{"volume named baton-socket", func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: VolumeName}) }, []string{"volume named baton-socket"}},
		{"port taken", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = DefaultHealthPort }, []string{"container app", "port 9810"}},
		{"socket directory taken", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "run", MountPath: "/var/run"}}
		}, []string{"container app", "/var/run", "mount it elsewhere"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := appPod(nil)
			tt.modify(pod)
			before := pod.DeepCopy()
			err := Inject(pod, testConfig())
			if err == nil {
				t.Fatal("injected; want a refusal")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !equality.Semantic.DeepEqual(pod, before) {
				t.Errorf("a refused pod was changed")
			}
		})
	}
}

func annotate(key, value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{key: value} }
}

func TestEtcdTLSAndAuth(t *testing.T) {
	cfg := testConfig()
	cfg.EtcdTLSSecret, cfg.EtcdClientCert, cfg.EtcdAuthSecret, cfg.MetricsPort = "etcd-tls", true, "etcd-user", 9811
	cfg.Args, cfg.ClusterName = []string{"--default-ttl=10m"}, "east"
	pod := appPod(nil)
	if err := Inject(pod, cfg); err != nil {
		t.Fatal(err)
	}
	sc := pod.Spec.InitContainers[0]
	for _, a := range []string{"--etcd-cacert=/etc/baton/etcd-tls/ca.crt", "--etcd-cert=/etc/baton/etcd-tls/tls.crt", "--etcd-key=/etc/baton/etcd-tls/tls.key", "--metrics-addr=:9811", "--default-ttl=10m", "--cluster-name=east"} {
		if !slices.Contains(sc.Args, a) {
			t.Errorf("args %q: want %s", sc.Args, a)
		}
	}
	if i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "etcd-tls" }); i < 0 {
		t.Errorf("volumes %+v: want the secret etcd-tls", pod.Spec.Volumes)
	}
	for _, name := range []string{"BATON_ETCD_USERNAME", "BATON_ETCD_PASSWORD"} {
		if e := env(&sc, name); e == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "etcd-user" {
			t.Errorf("%s: %+v, want it from the secret etcd-user", name, e)
		}
	}
}

// TestImagePullSecrets: an injected pod gets the sidecar image's pull
// secrets beside its own, once.
func TestImagePullSecrets(t *testing.T) {
	cfg := testConfig()
	cfg.ImagePullSecrets = []string{"registry", "app-registry"}
	pod := appPod(nil)
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "app-registry"}}
	if err := Inject(pod, cfg); err != nil {
		t.Fatal(err)
	}
	want := []corev1.LocalObjectReference{{Name: "app-registry"}, {Name: "registry"}}
	if !slices.Equal(pod.Spec.ImagePullSecrets, want) {
		t.Errorf("imagePullSecrets %v, want %v", pod.Spec.ImagePullSecrets, want)
	}
	if err := Inject(pod, cfg); err != nil || !slices.Equal(pod.Spec.ImagePullSecrets, want) {
		t.Errorf("injected again: %v, %v", pod.Spec.ImagePullSecrets, err)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"no image", func(c *Config) { c.Image = "" }, "image"},
		{"no endpoints", func(c *Config) { c.EtcdEndpoints = nil }, "etcdEndpoints"},
		{"endpoint without scheme", func(c *Config) { c.EtcdEndpoints = []string{"etcd:2379"} }, "etcdEndpoints"},
		{"pull policy", func(c *Config) { c.ImagePullPolicy = "Sometimes" }, "imagePullPolicy"},
		{"pull secret", func(c *Config) { c.ImagePullSecrets = []string{"Registry Key"} }, "imagePullSecrets"},
		{"cluster name", func(c *Config) { c.ClusterName = "East.1" }, "clusterName \"East.1\""},
		{"client cert without secret", func(c *Config) { c.EtcdClientCert = true }, "etcdTLSSecret"},
		{"lease TTL", func(c *Config) { c.LeaseTTL.Duration = time.Second }, "leaseTTL"},
		{"health port", func(c *Config) { c.HealthPort = 0 }, "healthPort"},
		{"same ports", func(c *Config) { c.MetricsPort = c.HealthPort }, "metricsPort"},
		{"request above limit", func(c *Config) { c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi") }, "resources"},
	}
	for _, tt := range tests {
		c := testConfig()
		tt.modify(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
		}
	}
	if err := testConfig().Validate(); err != nil {
		t.Errorf("the test config: %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("image: baton:1\netcdEndpoints: [\"https://etcd:2379\"]\nleaseTTL: 20s\nresources:\n  requests:\n    cpu: 20m\n"), 0o600)
	c, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseTTL.Duration != 20*time.Second || c.HealthPort != DefaultHealthPort || c.Resources.Requests.Cpu().String() != "20m" {
		t.Errorf("loaded %+v", c)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("image: baton:1\netcdEndpoints: [\"https://etcd:2379\"]\nleaseTime: 20s\n"), 0o600)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "leaseTime") {
		t.Errorf("an unknown field: %v, want an error naming it", err)
	}
}
