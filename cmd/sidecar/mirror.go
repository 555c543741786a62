//go:build !lean

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
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/access"
	"github.com/baton-dev/baton/internal/controller"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/etcdmembers"
	"github.com/baton-dev/baton/internal/webhook"
)

// mirrorOptions is everything `baton mirror` is configured with.
type mirrorOptions struct {
	kubeconfig   string
	etcd         etcdOptions
	ctl          controller.Config
	logLevel     string
	injectConfig string // empty: no injector
	access       access.Config
	maintain     bool               // --etcd-maintenance
	maint        etcdmaint.Config   // its rules
	members      string             // --etcd-members
	memberCfg    etcdmembers.Config // their keeping
}

// kubeCommands are the controller's commands, which the lean build leaves
// out.
func kubeCommands(getenv func(string) string, stdout, stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{newMirrorCmd(getenv, stderr), newEtcdGateCmd(stderr), newEtcdBackupCmd(getenv, stdout, stderr), newEtcdRestoreCmd(stdout)}
}

// mirrorLong is `baton mirror --help`.
const mirrorLong = `Copy the locks in etcd into Lock custom resources, one per held or
waited-on lock, in the namespace named by the lock's scope, and delete a
lock's key when its Lock is annotated baton.dev/force-release=<reason>
(only if the holder shown still holds it). Show each election as a
coordination.k8s.io Lease of its namespace (and, with --leader-labels,
label its leader's pod).

With --inject-config it also serves the sidecar injector, a mutating
admission webhook that adds Baton to each pod labelled
baton.dev/inject=true (see the Helm chart).

Runs as a Deployment with several replicas: one is elected leader (a
coordination.k8s.io Lease) and mirrors; the others wait. Every replica
serves the injector. The Kubernetes client configuration comes from
--kubeconfig, $KUBECONFIG, the in-cluster service account or
~/.kube/config, in that order. Every flag can also be set
by an environment variable (--free-retention by BATON_FREE_RETENTION).`

func newMirrorCmd(getenv func(string) string, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Copy the locks in etcd into Lock objects (kubectl get locks -A), carry out force releases, inject sidecars",
		Long:  mirrorLong,
		Args:  cobra.NoArgs,
	}
	o := &mirrorOptions{
		etcd:      etcdOptions{dialTimeout: 5 * time.Second},
		ctl:       controller.Default(),
		logLevel:  "info",
		access:    access.Default(),
		maint:     etcdmaint.Default(),
		memberCfg: etcdmembers.Default(),
	}
	if ns := getenv("POD_NAMESPACE"); ns != "" {
		o.ctl.ElectionNamespace = ns
	}
	o.access.Namespace = o.ctl.ElectionNamespace
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, in-cluster, ~/.kube/config")
	o.etcd.addFlags(fs, "etcd client URLs, comma-separated (required)")
	fs.StringSliceVar(&o.ctl.Mirror.Scopes, "scopes", nil, "mirror only these scopes, and write only their lock policies, comma-separated; default: all")
	fs.DurationVar(&o.ctl.Mirror.FreeRetention, "free-retention", o.ctl.Mirror.FreeRetention, "how long a freed lock's object shows its last holder before it is deleted")
	fs.BoolVar(&o.ctl.Mirror.LeaderLabels, "leader-labels", false, "label the pod of each election's leader that is annotated baton.dev/leader-label=true with leader.baton.dev/<the election's Lease>, so that a Service can select the leader; needs get, list and patch on pods")
	fs.StringVar(&o.ctl.Mirror.Cluster, "cluster-name", "", "this Kubernetes cluster's name when clusters share one etcd (the sidecars' --cluster-name): with --leader-labels, only a leader of this cluster's has its pod labelled")
	fs.BoolVar(&o.ctl.LeaderElection, "leader-elect", o.ctl.LeaderElection, "elect one leader among the replicas (a Lease); turn off only for a single replica")
	fs.StringVar(&o.ctl.ElectionNamespace, "leader-election-namespace", o.ctl.ElectionNamespace, "namespace of the election's Lease; default $POD_NAMESPACE or default")
	fs.StringVar(&o.ctl.Fences.Name, "fences-configmap", o.ctl.Fences.Name, "the ConfigMap, in the leader election's namespace, that keeps the highest etcd revision seen, so that no fence is granted twice after etcd is restored from an older snapshot or loses its data (see docs/reliability.md); empty: none")
	fs.StringVar(&o.ctl.OwnerClusterRole, "owner-cluster-role", "", "make this ClusterRole the owner of every Lock object, so that deleting it deletes them (the chart gives its controller's: helm uninstall takes the Lock objects with it); the controller needs get on it. Empty: none")
	fs.StringVar(&o.ctl.HealthAddr, "health-addr", o.ctl.HealthAddr, "TCP address for /healthz and /readyz; empty disables")
	fs.StringVar(&o.ctl.MetricsAddr, "metrics-addr", o.ctl.MetricsAddr, "TCP address for Prometheus /metrics; empty disables")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	fs.StringVar(&o.injectConfig, "inject-config", "", "serve the sidecar injector (a mutating webhook for pods labelled baton.dev/inject=true) with this file's settings (YAML); empty: no injector")
	fs.IntVar(&o.ctl.WebhookPort, "webhook-port", o.ctl.WebhookPort, "port of the webhook server (HTTPS), with --inject-config")
	fs.StringVar(&o.ctl.WebhookCertDir, "webhook-cert-dir", o.ctl.WebhookCertDir, "directory with the webhook server's tls.crt and tls.key")
	fs.StringVar(&o.access.CASecret, "etcd-ca-secret", "", "keep etcd's certificates and users (the chart's own etcd): the CA in this Secret of --etcd-secrets-namespace, made on first start; the controller is etcd's root user. Empty: etcd is secured by others")
	fs.BoolVar(&o.access.ExternalCA, "etcd-ca-external", false, "with --etcd-ca-secret: the CA Secret is made and renewed by another (cert-manager); wait for it rather than make it")
	fs.StringVar(&o.access.Namespace, "etcd-secrets-namespace", o.access.Namespace, "namespace of the CA and etcd's certificate; default $POD_NAMESPACE")
	fs.StringVar(&o.access.ServerSecret, "etcd-server-secret", "", "with --etcd-ca-secret: the Secret to keep etcd's certificate in, for clients and peers; empty: another (cert-manager) keeps it")
	fs.StringSliceVar(&o.access.ServerNames, "etcd-server-names", nil, "with --etcd-ca-secret: the DNS names and IPs in etcd's certificate, comma-separated")
	fs.StringVar(&o.access.ClientSecret, "etcd-client-secret", o.access.ClientSecret, "with --etcd-ca-secret: the Secret made in each namespace with injected pods, holding its sidecars' etcd certificate")
	fs.DurationVar(&o.access.Validity, "etcd-cert-validity", o.access.Validity, "with --etcd-ca-secret: how long issued certificates are valid; each is renewed at two thirds of its life")
	fs.BoolVar(&o.maintain, "etcd-maintenance", false, "keep etcd (the chart's own; the controller must be its root user): the leader defragments its members by the rules below, one at a time and the leader last, and when etcd is out of space compacts its history, defragments it and disarms the NOSPACE alarm")
	addMaintFlags(fs, &o.maint, "with --etcd-maintenance, etcd's")
	addMembersFlags(fs, &o.members, &o.memberCfg)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.etcd.password = getenv("BATON_ETCD_PASSWORD")
		if o.ctl.Fences.Name == "" {
			o.ctl.Fences = nil
		}
		if f := maintChanged(cmd.Flags()); f != "" && !o.maintain {
			return usageError{fmt.Errorf("--%s: only with --etcd-maintenance", f)}
		}
		if o.maintain {
			o.ctl.Maintain = &o.maint
		}
		var err error
		if o.ctl.Members, err = membersConfig(cmd.Flags(), o.members, o.memberCfg, o.ctl.ElectionNamespace); err != nil {
			return usageError{flagError(err)}
		}
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
	if o.injectConfig != "" {
		c, err := webhook.Load(o.injectConfig)
		if err != nil {
			return fmt.Errorf("--inject-config: %w", err)
		}
		o.ctl.Inject = &c
	}
	if err := o.ctl.Validate(); err != nil {
		return flagError(err)
	}
	if o.access.CASecret != "" {
		if o.etcd.caCert != "" || o.etcd.cert != "" || o.etcd.username != "" {
			return errors.New("--etcd-ca-secret: the controller makes its own etcd credentials; give no --etcd-cacert, --etcd-cert or --etcd-username with it")
		}
		if err := o.access.Validate(); err != nil {
			return flagError(err)
		}
	}
	for flag, addr := range map[string]string{"--health-addr": o.ctl.HealthAddr, "--metrics-addr": o.ctl.MetricsAddr} {
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
	return kubeConfig(o.kubeconfig, getenv)
}

// kubeConfig is the Kubernetes client configuration of the file explicit,
// or as mirrorOptions.kubeConfig finds it without.
func kubeConfig(explicit string, getenv func(string) string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	switch {
	case explicit != "":
		rules.ExplicitPath = explicit
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
	kcfg, err := o.kubeConfig(getenv)
	if err != nil {
		return err
	}
	log := logr.FromSlogHandler(logs.log.Handler())
	if o.access.CASecret != "" {
		c, err := client.New(kcfg, client.Options{})
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		if o.ctl.Access, err = access.Prepare(cmd.Context(), c, o.access, log); err != nil {
			return err
		}
		o.etcd.tls = o.ctl.Access.ClientTLS()
	}
	cli, err := o.etcd.client(o.etcd.endpoints, logs.etcdClient)
	if err != nil {
		return err
	}
	defer cli.Close()
	if o.ctl.Access != nil {
		o.ctl.Access.Connect(cli)
	}
	logs.log.Info("starting the controller", "etcd", o.etcd.endpoints)
	return controller.Run(cmd.Context(), kcfg, cli, o.ctl, log)
}
