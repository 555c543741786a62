package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/mirror"
	"github.com/baton-dev/baton/internal/version"
)

// mirrorOptions is everything `baton mirror` is configured with.
type mirrorOptions struct {
	kubeconfig        string
	etcd              etcdOptions
	mirror            mirror.Config
	leaderElect       bool
	electionNamespace string
	healthAddr        string
	metricsAddr       string
	logLevel          string
	injectConfig      string // empty: no injector
	inject            inject.Config
	webhookPort       int
	webhookCertDir    string
}

func newMirrorCmd(getenv func(string) string, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Copy the locks in etcd into Lock objects (kubectl get locks -A), carry out force releases, inject sidecars",
		Long: `Copy the locks in etcd into Lock custom resources, one per held or
waited-on lock, in the namespace named by the lock's scope, and delete a
lock's key when its Lock is annotated baton.dev/force-release=<reason>
(only if the holder shown still holds it).

With --inject-config it also serves the sidecar injector, a mutating
admission webhook that adds Baton to each pod labelled
baton.dev/inject=true (see the Helm chart).

Runs as a Deployment with several replicas: one is elected leader (a
coordination.k8s.io Lease) and mirrors; the others wait. Every replica
serves the injector. The Kubernetes client configuration comes from
--kubeconfig, $KUBECONFIG, the in-cluster service account or
~/.kube/config, in that order. Every flag can also be set
by an environment variable (--free-retention by BATON_FREE_RETENTION).`,
		Args: cobra.NoArgs,
	}
	o := &mirrorOptions{
		etcd:              etcdOptions{dialTimeout: 5 * time.Second},
		mirror:            mirror.Default(),
		leaderElect:       true,
		electionNamespace: getenv("POD_NAMESPACE"),
		healthAddr:        ":8081",
		metricsAddr:       ":8080",
		logLevel:          "info",
	}
	if o.electionNamespace == "" {
		o.electionNamespace = "default"
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, in-cluster, ~/.kube/config")
	o.etcd.addFlags(fs, "etcd client URLs, comma-separated (required)")
	fs.StringSliceVar(&o.mirror.Scopes, "scopes", nil, "mirror only these scopes, comma-separated; default: all")
	fs.DurationVar(&o.mirror.FreeRetention, "free-retention", o.mirror.FreeRetention, "how long a freed lock's object shows its last holder before it is deleted")
	fs.BoolVar(&o.leaderElect, "leader-elect", o.leaderElect, "elect one leader among the replicas (a Lease); turn off only for a single replica")
	fs.StringVar(&o.electionNamespace, "leader-election-namespace", o.electionNamespace, "namespace of the election's Lease; default $POD_NAMESPACE or default")
	fs.StringVar(&o.healthAddr, "health-addr", o.healthAddr, "TCP address for /healthz and /readyz; empty disables")
	fs.StringVar(&o.metricsAddr, "metrics-addr", o.metricsAddr, "TCP address for Prometheus /metrics; empty disables")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	fs.StringVar(&o.injectConfig, "inject-config", "", "serve the sidecar injector (a mutating webhook for pods labelled baton.dev/inject=true) with this file's settings (YAML); empty: no injector")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the webhook server (HTTPS), with --inject-config")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory with the webhook server's tls.crt and tls.key")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.etcd.password = getenv("BATON_ETCD_PASSWORD")
		if err := o.validate(); err != nil {
			return usageError{err}
		}
		return runMirror(cmd, o, getenv, stderr)
	}
	return cmd
}

func (o *mirrorOptions) validate() error {
	if len(o.etcd.endpoints) == 0 {
		return errors.New("--etcd-endpoints: required; the mirror reads the etcd cluster the sidecars use")
	}
	if err := o.etcd.validate(); err != nil {
		return err
	}
	if err := o.mirror.Validate(); err != nil {
		return flagError(err)
	}
	if o.injectConfig != "" {
		c, err := inject.Load(o.injectConfig)
		if err != nil {
			return fmt.Errorf("--inject-config: %w", err)
		}
		o.inject = c
	}
	if o.webhookPort < 1 || o.webhookPort > 65535 {
		return fmt.Errorf("--webhook-port %d: want a port from 1 to 65535", o.webhookPort)
	}
	for flag, addr := range map[string]string{"--health-addr": o.healthAddr, "--metrics-addr": o.metricsAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: want host:port, e.g. :8081", flag, addr)
		}
	}
	return nil
}

// kubeConfig loads the Kubernetes client configuration from --kubeconfig,
// $KUBECONFIG, the in-cluster service account or ~/.kube/config, the first
// that is there. With none, the error says what to give, in one line.
func (o *mirrorOptions) kubeConfig(getenv func(string) string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	switch {
	case o.kubeconfig != "":
		rules.ExplicitPath = o.kubeconfig
	case getenv("KUBECONFIG") != "":
		rules.Precedence = filepath.SplitList(getenv("KUBECONFIG"))
	case getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster Kubernetes configuration: %w", err)
		}
		return cfg, nil
	default:
		home := getenv("HOME")
		path := filepath.Join(home, ".kube", "config")
		if _, err := os.Stat(path); home == "" || err != nil {
			return nil, usageError{errors.New("no Kubernetes configuration: give --kubeconfig FILE, set $KUBECONFIG, run in a pod (its service account), or create ~/.kube/config")}
		}
		rules.Precedence = []string{path}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	return cfg, nil
}

func runMirror(cmd *cobra.Command, o *mirrorOptions, getenv func(string) string, stderr io.Writer) error {
	logs, err := newLoggers(stderr, o.logLevel)
	if err != nil {
		return err
	}
	log := logr.FromSlogHandler(logs.log.Handler())
	ctrl.SetLogger(log)
	kcfg, err := o.kubeConfig(getenv)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		return err
	}
	metricsAddr, healthAddr := o.metricsAddr, o.healthAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	mgr, err := ctrl.NewManager(kcfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        healthAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "baton-mirror",
		LeaderElectionNamespace:       o.electionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Every replica serves the injector; only the leader mirrors.
		WebhookServer: webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.webhookCertDir}),
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	if o.injectConfig != "" {
		inj, err := inject.NewInjector(o.inject, scheme)
		if err != nil {
			return fmt.Errorf("--inject-config: %w", err)
		}
		inj.Register(mgr.GetWebhookServer())
		if healthAddr != "" {
			if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
				return err
			}
		}
	}
	// The manager serves controller-runtime's registry; a second mirror in
	// one process (tests) finds the metric there already.
	if err := metrics.RegisterBuildInfo(crmetrics.Registry, version.Get()); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}
	if healthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return err
		}
	}
	cli, err := o.etcd.client(o.etcd.endpoints, logs.etcdClient)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := mirror.Setup(mgr, o.mirror, cli); err != nil {
		return err
	}
	logs.log.Info("mirroring", "etcd", o.etcd.endpoints, "scopes", o.mirror.Scopes, "leaderElection", o.leaderElect, "injector", o.injectConfig != "")
	return mgr.Start(cmd.Context())
}
