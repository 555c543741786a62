//go:build !lean

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/access"
	"github.com/baton-dev/baton/internal/etcdbackup"
	"github.com/baton-dev/baton/internal/server"
)

// backupOptions is everything `baton etcd-backup` is configured with.
type backupOptions struct {
	etcd       etcdOptions
	kubeconfig string
	caSecret   string // --etcd-ca-secret: sign in as etcd's root with its CA
	namespace  string // of the CA Secret
	cfg        etcdbackup.Config
	once, list bool
	metrics    string // --metrics-addr
	logLevel   string
}

// newEtcdBackupCmd is `baton etcd-backup`, the chart's backups of its etcd
// (package etcdbackup).
func newEtcdBackupCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd-backup",
		Short: "Take snapshots of etcd into a directory on a schedule and keep the newest (the chart's etcd backups)",
		Long: `Take a snapshot of etcd every --every into --dir, named
db-<UTC time>-r<revision>.db, and delete the oldest beyond --keep; the
first once the newest there is --every old. --once takes one now and
exits; --list lists those kept. etcdutl snapshot restore reads them
(docs/operations.md, "Restore etcd from a backup").

A snapshot needs etcd's root: with --etcd-ca-secret the command signs in
as root with a certificate of the chart's etcd's CA, read from that Secret
(the controller's service account may read it). With --metrics-addr it
serves Prometheus's /metrics: when the newest snapshot was taken, and the
snapshots that failed (the alert BatonEtcdBackupMissing reads them). Every
flag can also be set by an environment variable (--keep by BATON_KEEP).`,
		Args: cobra.NoArgs,
	}
	o := &backupOptions{etcd: etcdOptions{dialTimeout: 5 * time.Second}, cfg: etcdbackup.Default(), logLevel: "info", namespace: getenv("POD_NAMESPACE")}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.cfg.Dir, "dir", "", "the directory the snapshots are kept in (required)")
	fs.DurationVar(&o.cfg.Every, "every", o.cfg.Every, "how often a snapshot is taken")
	fs.IntVar(&o.cfg.Keep, "keep", o.cfg.Keep, "how many snapshots are kept, the newest")
	fs.BoolVar(&o.once, "once", false, "take one snapshot now, and exit")
	fs.BoolVar(&o.list, "list", false, "list the snapshots kept, the newest first, and exit")
	o.etcd.addFlags(fs, "etcd client URL: one (required but with --list)")
	fs.StringVar(&o.caSecret, "etcd-ca-secret", "", "sign in as etcd's root user with a certificate of the CA in this Secret (the chart's etcd's); empty: with the --etcd-* credentials")
	fs.StringVar(&o.namespace, "etcd-secrets-namespace", o.namespace, "namespace of --etcd-ca-secret; default $POD_NAMESPACE")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file, with --etcd-ca-secret; default: $KUBECONFIG, in-cluster, ~/.kube/config")
	fs.StringVar(&o.metrics, "metrics-addr", "", "TCP address for Prometheus /metrics while snapshots are taken on the schedule, e.g. :8080; empty disables")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.etcd.password = getenv("BATON_ETCD_PASSWORD")
		if err := o.validate(); err != nil {
			return usageError{err}
		}
		if o.list {
			return listBackups(stdout, o.cfg.Dir)
		}
		return runBackups(cmd, o, getenv, stdout, stderr)
	}
	return cmd
}

func (o *backupOptions) validate() error {
	switch {
	case o.once && o.list:
		return errors.New("--once and --list: give one")
	case o.cfg.Dir == "":
		return errors.New("--dir: required: the directory the snapshots are kept in")
	case o.list:
		return nil
	case len(o.etcd.endpoints) != 1:
		return errors.New("--etcd-endpoints: give one URL: a snapshot is streamed from one member")
	case o.caSecret != "" && (o.etcd.caCert != "" || o.etcd.cert != "" || o.etcd.username != ""):
		return errors.New("--etcd-ca-secret: the command makes its own etcd credentials; give no --etcd-cacert, --etcd-cert or --etcd-username with it")
	case o.caSecret != "" && o.namespace == "":
		return errors.New("--etcd-secrets-namespace: required with --etcd-ca-secret outside a pod")
	case o.metrics != "" && o.once:
		return errors.New("--metrics-addr: serves the schedule's metrics; --once takes one snapshot and exits")
	}
	if o.metrics != "" {
		if _, _, err := net.SplitHostPort(o.metrics); err != nil {
			return fmt.Errorf("--metrics-addr %q: want host:port, e.g. :8080", o.metrics)
		}
	}
	if err := o.etcd.validate(); err != nil {
		return err
	}
	return flagError(o.cfg.Validate())
}

// listBackups prints the snapshots in dir.
func listBackups(stdout io.Writer, dir string) error {
	all, err := etcdbackup.List(dir)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FILE\tREVISION\tBYTES\tTAKEN")
	for _, b := range all {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", b.Name, b.Revision, b.Size, b.Taken.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}

// runBackups takes one snapshot (--once) or keeps taking them.
func runBackups(cmd *cobra.Command, o *backupOptions, getenv func(string) string, stdout, stderr io.Writer) error {
	logs, err := newLoggers(stderr, o.logLevel)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if o.caSecret != "" {
		kcfg, err := kubeConfig(o.kubeconfig, getenv)
		if err != nil {
			return err
		}
		c, err := client.New(kcfg, client.Options{})
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		if o.etcd.tls, err = access.RootTLS(ctx, c, client.ObjectKey{Namespace: o.namespace, Name: o.caSecret}, time.Hour); err != nil {
			return err
		}
	}
	cli, err := o.etcd.client(o.etcd.endpoints, logs.etcdClient)
	if err != nil {
		return err
	}
	defer cli.Close()
	if !o.once {
		return scheduleBackups(ctx, cli, o, logs.log)
	}
	start := time.Now()
	b, deleted, err := etcdbackup.Take(ctx, cli, o.cfg, start)
	if err != nil {
		return fmt.Errorf("etcd backup: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s (revision %d, %d bytes) in %v", b.Name, b.Revision, b.Size, time.Since(start).Round(time.Millisecond))
	if len(deleted) > 0 {
		fmt.Fprintf(stdout, "; deleted %v, beyond the newest %d", deleted, o.cfg.Keep)
	}
	fmt.Fprintln(stdout)
	return nil
}

// scheduleBackups runs the schedule, serving its metrics on --metrics-addr.
func scheduleBackups(ctx context.Context, cli *clientv3.Client, o *backupOptions, log *slog.Logger) error {
	if o.metrics == "" {
		return etcdbackup.Run(ctx, cli, o.cfg, log, nil)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := etcdbackup.NewMetrics(reg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.metrics)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := server.Serve(ctx, srv, l, time.Second); err != nil {
			log.Error("etcd backups: the metrics server stopped; the backups go on, unscraped", "addr", o.metrics, "err", err)
		}
	}()
	err = etcdbackup.Run(ctx, cli, o.cfg, log, obs)
	stop()
	<-served
	return err
}
