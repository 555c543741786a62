// Package webhook gives pods a Baton sidecar: a mutating admission webhook
// that adds the sidecar, as a native sidecar (an init container that keeps
// running), to every pod labelled baton.dev/inject=true, with the socket's
// volume and BATON_SOCKET in each of the pod's containers.
package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/baton-dev/baton/internal/lease"
)

// Config is what every injected sidecar gets; a pod's annotations may
// override the lease TTL and the resources. It is read from a file (YAML or
// JSON, the field names below), which the Helm chart renders from its
// values.
type Config struct {
	// Image is the sidecar's image. Required.
	Image string `json:"image"`
	// ImagePullPolicy is the sidecar's pull policy. Default IfNotPresent.
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// ImagePullSecrets name Secrets, in the pod's namespace, that an
	// injected pod gets among its imagePullSecrets to pull Image (those it
	// has already are kept). Empty: none are added.
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// EtcdEndpoints are the client URLs of the etcd cluster the sidecars
	// join. Required: an injected sidecar never starts an embedded etcd.
	EtcdEndpoints []string `json:"etcdEndpoints"`
	// EtcdTLSSecret names a Secret, in the pod's namespace, with ca.crt
	// (and tls.crt and tls.key when EtcdClientCert is set), mounted into the
	// sidecar. Empty: no TLS settings are passed.
	EtcdTLSSecret string `json:"etcdTLSSecret,omitempty"`
	// EtcdClientCert says that EtcdTLSSecret also holds a client
	// certificate for etcd.
	EtcdClientCert bool `json:"etcdClientCert,omitempty"`
	// EtcdAuthSecret names a Secret, in the pod's namespace, with the keys
	// username and password of an etcd user. Empty: no authentication.
	EtcdAuthSecret string `json:"etcdAuthSecret,omitempty"`
	// LeaseTTL is the sidecar's lease TTL: how long a crashed pod's locks
	// stay held. Default 10s; the annotation baton.dev/lease-ttl overrides.
	LeaseTTL metav1.Duration `json:"leaseTTL,omitempty"`
	// Resources are the sidecar's. Default: requests of 10m CPU and 64Mi of
	// memory, a limit of 128Mi of memory. Annotations override each.
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// HealthPort is the sidecar's port for its probes, in the pod's network
	// namespace, so it must not clash with the app's ports. Default 9810.
	HealthPort int32 `json:"healthPort,omitempty"`
	// MetricsPort, when not 0, serves the sidecar's Prometheus metrics.
	MetricsPort int32 `json:"metricsPort,omitempty"`
	// Args are more flags for `baton serve`, such as --default-ttl=10m.
	Args []string `json:"args,omitempty"`
	// DaprStores are the Dapr lock stores of the sidecars of pods with
	// Dapr's lock API on (baton.dev/dapr: "true"), each in the form of
	// --dapr-store: name=NAME[,prefix=PREFIX][,keyPrefix=STRATEGY]. Empty:
	// the store lockstore, keyed by app id.
	DaprStores []string `json:"daprStores,omitempty"`
	// ClusterName names this Kubernetes cluster in the holder records of
	// its sidecars (--cluster-name), for clusters that share one etcd.
	// Empty: not shared, no name.
	ClusterName string `json:"clusterName,omitempty"`
}

// Defaults of Config.
const (
	DefaultHealthPort = 9810
	DefaultLeaseTTL   = 10 * time.Second
)

// Default returns a Config with the documented defaults and neither image
// nor etcd endpoints.
func Default() Config {
	return Config{
		ImagePullPolicy: corev1.PullIfNotPresent,
		LeaseTTL:        metav1.Duration{Duration: DefaultLeaseTTL},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		HealthPort: DefaultHealthPort,
	}
}

// Load reads a Config from a YAML or JSON file over the defaults, strictly:
// an unknown field is an error.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c := Default()
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks the fields.
func (c Config) Validate() error {
	if c.Image == "" {
		return errors.New("image: required")
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("imagePullPolicy %q: use Always, IfNotPresent or Never", c.ImagePullPolicy)
	}
	for _, name := range c.ImagePullSecrets {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("imagePullSecrets: %q is not a Secret name: %s", name, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Label(c.ClusterName); c.ClusterName != "" && len(errs) > 0 {
		return fmt.Errorf("clusterName %q: %s", c.ClusterName, strings.Join(errs, "; "))
	}
	if len(c.EtcdEndpoints) == 0 {
		return errors.New("etcdEndpoints: required; injected sidecars join this etcd cluster")
	}
	for _, ep := range c.EtcdEndpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("etcdEndpoints: %q: want a URL such as https://baton-etcd-0.baton-etcd:2379", ep)
		}
	}
	if c.EtcdClientCert && c.EtcdTLSSecret == "" {
		return errors.New("etcdClientCert: the certificate comes from etcdTLSSecret, which is not set")
	}
	if err := checkLeaseTTL(c.LeaseTTL.Duration); err != nil {
		return fmt.Errorf("leaseTTL: %w", err)
	}
	if err := checkResources(c.Resources); err != nil {
		return fmt.Errorf("resources: %w", err)
	}
	for name, p := range map[string]int32{"healthPort": c.HealthPort, "metricsPort": c.MetricsPort} {
		if p < 0 || p > 65535 || (p == 0 && name == "healthPort") {
			return fmt.Errorf("%s %d: want a port from 1 to 65535", name, p)
		}
	}
	if c.HealthPort == c.MetricsPort {
		return fmt.Errorf("metricsPort %d: the health port uses it", c.MetricsPort)
	}
	for _, p := range []int32{c.HealthPort, c.MetricsPort} {
		if p == DaprHTTPPort || p == DaprGRPCPort {
			return fmt.Errorf("port %d: daprd's, where pods with %s get Dapr's lock API; choose another", p, AnnotationDapr)
		}
	}
	if err := checkDaprStores(c.DaprStores); err != nil {
		return fmt.Errorf("daprStores: %w", err)
	}
	return nil
}

// maxLeaseTTL bounds the lease TTL: past it a crashed pod's locks would stay
// held for longer than anyone waits for them.
const maxLeaseTTL = 10 * time.Minute

func checkLeaseTTL(d time.Duration) error {
	if d < lease.MinTTL || d > maxLeaseTTL {
		return fmt.Errorf("%v: want %v to %v", d, lease.MinTTL, maxLeaseTTL)
	}
	return nil
}

// checkResources refuses requests above limits, which the API server would
// otherwise refuse with a message about a container the user did not write.
func checkResources(r corev1.ResourceRequirements) error {
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			return fmt.Errorf("the %s request %s is above its limit %s", name, req.String(), lim.String())
		}
	}
	return nil
}
