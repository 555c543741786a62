// Package controller runs Baton's controller: one controller-runtime
// manager in which the leader among the replicas mirrors etcd's locks into
// Lock objects and carries out force releases (package mirror) and writes
// LockPolicy objects into etcd (package policysync) and, for the chart's
// own etcd, keeps its certificates and users (package access), and every
// replica serves the sidecar injector webhook (package webhook).
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/access"
	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/etcdmembers"
	"github.com/baton-dev/baton/internal/highwater"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/mirror"
	"github.com/baton-dev/baton/internal/policysync"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/internal/webhook"
)

// ElectionID is the name of the Lease the replicas elect their leader with.
const ElectionID = "baton-mirror"

// Config is what the controller runs with.
type Config struct {
	// Mirror configures the mirror.
	Mirror mirror.Config
	// Inject, when not nil, is served as the sidecar injector webhook.
	Inject *webhook.Config
	// LeaderElection elects one replica to mirror (a Lease named
	// ElectionID in ElectionNamespace); off only for a single replica.
	LeaderElection    bool
	ElectionNamespace string
	// HealthAddr serves /healthz and /readyz (ready once the webhook
	// serves); empty: none.
	HealthAddr string
	// MetricsAddr serves Prometheus /metrics; empty: none.
	MetricsAddr string
	// WebhookPort and WebhookCertDir (tls.crt, tls.key) are the injector's
	// HTTPS server.
	WebhookPort    int
	WebhookCertDir string
	// Fences, when not nil, keeps the fences' high-water mark in a
	// ConfigMap and writes it into every scope's fence floor when etcd
	// goes back in time (package highwater). Its Scopes and RequestTimeout
	// are the mirror's, its Namespace the election's when empty.
	Fences *highwater.Config
	// OwnerClusterRole, when not empty, names the ClusterRole made the
	// owner of every Lock object (mirror.Config.Owner): the chart gives its
	// controller's, so that helm uninstall deletes the Lock objects with
	// it. The controller needs get on it. Default: none.
	OwnerClusterRole string
	// Maintain, when not nil, has the leader keep the etcd (the chart's
	// own, whose root the controller is): its members defragmented by
	// these rules, room made and the NOSPACE alarm disarmed when etcd is
	// out of space (package etcdmaint). Default: none, for an etcd of
	// others.
	Maintain *etcdmaint.Config
	// Members, when not nil, has the leader keep the membership of the
	// chart's etcd, whose root the controller is: it tells a member pod
	// that starts without data whether to found the cluster or join it,
	// and replaces a member that lost its data (package etcdmembers).
	// Default: none.
	Members *etcdmembers.Config
	// Access, when not nil, keeps the chart's etcd's certificates and
	// users (access.Prepare made it; the etcd client authenticates with
	// its ClientTLS and was given to it by Connect), and the injector gives
	// each namespace its credentials before its first pod.
	Access *access.Keeper
}

// Default returns the documented defaults: leader election on, health on
// :8081, metrics on :8080, the webhook on 9443 with controller-runtime's
// certificate directory, the fences' high-water mark kept in the ConfigMap
// baton-fences of the election's namespace.
func Default() Config {
	return Config{
		Mirror:            mirror.Default(),
		LeaderElection:    true,
		ElectionNamespace: "default",
		HealthAddr:        ":8081",
		MetricsAddr:       ":8080",
		WebhookPort:       9443,
		WebhookCertDir:    "/tmp/k8s-webhook-server/serving-certs",
		Fences:            ptr.To(highwater.Default()),
	}
}

// Validate checks the fields.
func (c Config) Validate() error {
	if err := c.Mirror.Validate(); err != nil {
		return err
	}
	if c.Inject != nil {
		if err := c.Inject.Validate(); err != nil {
			return err
		}
	}
	if c.WebhookPort < 1 || c.WebhookPort > 65535 {
		return config.Invalid("controller.WebhookPort", "webhook port %d: want a port from 1 to 65535", c.WebhookPort)
	}
	if c.LeaderElection && c.ElectionNamespace == "" {
		return config.Invalid("controller.ElectionNamespace", "leader election namespace: required with leader election")
	}
	if c.Maintain != nil {
		if err := c.Maintain.Validate(); err != nil {
			return err
		}
	}
	if c.Members != nil {
		if err := c.Members.Validate(); err != nil {
			return err
		}
	}
	if c.Fences != nil {
		return c.fences().Validate()
	}
	return nil
}

// fences is the Fences configuration completed from the mirror's and the
// election's.
func (c Config) fences() highwater.Config {
	f := *c.Fences
	f.Scopes, f.RequestTimeout = c.Mirror.Scopes, c.Mirror.RequestTimeout
	if f.Namespace == "" {
		f.Namespace = c.ElectionNamespace
	}
	return f
}

// Run runs the controller against the cluster of kcfg and the etcd of
// cli until ctx ends.
func Run(ctx context.Context, kcfg *rest.Config, cli *clientv3.Client, cfg Config, log logr.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctrl.SetLogger(log)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		return err
	}
	if cfg.OwnerClusterRole != "" {
		owner, err := clusterRoleRef(ctx, kcfg, scheme, cfg.OwnerClusterRole)
		if err != nil {
			return err
		}
		cfg.Mirror.Owner = owner
	}
	metricsAddr := cfg.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0" // controller-runtime's "off"
	}
	mgr, err := ctrl.NewManager(kcfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        cfg.HealthAddr,
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              ElectionID,
		LeaderElectionNamespace:       cfg.ElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Every replica serves the injector; only the leader mirrors.
		WebhookServer: crwebhook.NewServer(crwebhook.Options{Port: cfg.WebhookPort, CertDir: cfg.WebhookCertDir}),
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	counts, err := metrics.NewController(crmetrics.Registry)
	if err != nil {
		return err
	}
	if cfg.Inject != nil {
		if err := serveInjector(mgr, cfg, scheme, counts); err != nil {
			return err
		}
	}
	// The manager serves controller-runtime's registry; a second
	// controller in one process (tests) finds the metric there already.
	if err := metrics.RegisterBuildInfo(crmetrics.Registry, version.Get()); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}
	if cfg.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return err
		}
	}
	if _, err := mirror.Setup(mgr, cfg.Mirror, cli, mirror.OnForceRelease(counts.ForceReleased)); err != nil {
		return err
	}
	if _, err := policysync.Setup(mgr, cli, cfg.Mirror.Scopes, cfg.Mirror.RequestTimeout, policysync.OnWrite(counts.PolicyWritten)); err != nil {
		return err
	}
	if err := setupEtcdKeepers(mgr, cli, cfg); err != nil {
		return err
	}
	log.Info("mirroring", "scopes", cfg.Mirror.Scopes, "leaderElection", cfg.LeaderElection, "injector", cfg.Inject != nil)
	return mgr.Start(ctx)
}

// setupEtcdKeepers adds what keeps etcd and its fences, as cfg asks: the
// fences' high-water mark, etcd's credentials, its members, its
// maintenance.
func setupEtcdKeepers(mgr ctrl.Manager, cli *clientv3.Client, cfg Config) error {
	if cfg.Fences != nil {
		if _, err := highwater.Setup(mgr, cli, cfg.fences()); err != nil {
			return err
		}
	}
	if cfg.Access != nil {
		if err := cfg.Access.Setup(mgr); err != nil {
			return err
		}
	}
	if cfg.Members != nil {
		m, err := etcdmembers.New(cli, mgr.GetClient(), mgr.GetAPIReader(), *cfg.Members, slog.New(logr.ToSlogHandler(mgr.GetLogger().WithName("etcd-members"))))
		if err != nil {
			return err
		}
		if err := mgr.Add(leaderRunnable(m.Run)); err != nil {
			return err
		}
	}
	if cfg.Maintain != nil {
		return maintain(mgr, cli, *cfg.Maintain)
	}
	return nil
}

// maintain has the leader keep etcd (package etcdmaint), its series on the
// controller's metrics.
func maintain(mgr ctrl.Manager, cli *clientv3.Client, cfg etcdmaint.Config) error {
	obs, err := metrics.NewEtcd(crmetrics.Registry)
	if err != nil {
		return err
	}
	m, err := etcdmaint.New(cli, cfg, slog.New(logr.ToSlogHandler(mgr.GetLogger().WithName("etcd-maintenance"))), obs)
	if err != nil {
		return err
	}
	return mgr.Add(leaderRunnable(m.Run))
}

// leaderRunnable is f, run by the elected leader only.
type leaderRunnable func(context.Context) error

// Start implements manager.Runnable.
func (f leaderRunnable) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (leaderRunnable) NeedLeaderElection() bool { return true }

// clusterRoleRef reads the ClusterRole name and returns a reference to it
// as the owner of the Lock objects.
func clusterRoleRef(ctx context.Context, kcfg *rest.Config, scheme *runtime.Scheme, name string) (*metav1.OwnerReference, error) {
	c, err := client.New(kcfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	var role rbacv1.ClusterRole
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &role); err != nil {
		return nil, fmt.Errorf("the ClusterRole %s, owner of the Lock objects (--owner-cluster-role): %w", name, err)
	}
	return &metav1.OwnerReference{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole", Name: name, UID: role.UID}, nil
}

// serveInjector registers the sidecar injector on mgr's webhook server,
// counting its answers, and its readiness check.
func serveInjector(mgr ctrl.Manager, cfg Config, scheme *runtime.Scheme, counts *metrics.Controller) error {
	for _, o := range webhook.Outcomes() {
		counts.InitInjections(string(o))
	}
	opts := []webhook.Option{webhook.OnOutcome(func(o webhook.Outcome) { counts.Injected(string(o)) })}
	if cfg.Access != nil {
		opts = append(opts, webhook.WithCredentials(func(ctx context.Context, ns string) error {
			_, err := cfg.Access.Ensure(ctx, ns)
			return err
		}))
	}
	inj, err := webhook.NewInjector(*cfg.Inject, scheme, opts...)
	if err != nil {
		return fmt.Errorf("injector: %w", err)
	}
	inj.Register(mgr.GetWebhookServer())
	if cfg.HealthAddr != "" {
		return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
	}
	return nil
}
