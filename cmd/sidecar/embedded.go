//go:build !lean

package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/metrics"
)

// validateEmbedded checks the embedded etcd's flags, for a serve without
// --etcd-endpoints.
func validateEmbedded(o embeddedOptions) error {
	if err := o.config().Validate(); err != nil {
		return flagError(err)
	}
	if err := o.maint.Validate(); err != nil {
		return flagError(err)
	}
	return nil
}

// config is the embedded etcd's configuration from the flags.
func (o embeddedOptions) config() embedetcd.Config {
	cfg := embedetcd.Default(o.dataDir)
	cfg.ClientURL, cfg.History, cfg.Quota = o.clientURL, o.history, o.quota
	return cfg
}

// startEmbedded starts the embedded etcd of a serve without
// --etcd-endpoints and sets the sidecar's endpoints to it.
func (sc *sidecar) startEmbedded(ctx context.Context) error {
	cfg := sc.o.embedded.config()
	cfg.Logger = sc.logs.etcdServer
	e, err := embedetcd.Start(ctx, cfg)
	if errors.Is(err, syscall.EADDRINUSE) {
		return usageError{fmt.Errorf("--embedded-client-url %s: the port is in use (another etcd, or another baton serve?): choose another, or join that etcd with --etcd-endpoints: %w", sc.o.embedded.clientURL, err)}
	}
	if err != nil {
		return err
	}
	sc.closers = append(sc.closers, func() {
		sc.logs.quiet() // its shutdown logs errors that are none
		e.Close()
	})
	sc.endpoints = e.Endpoints()
	sc.maintain = func(cli *clientv3.Client) (*etcdmaint.Maintainer, error) {
		obs, err := metrics.NewEtcd(sc.reg)
		if err != nil {
			return nil, err
		}
		return etcdmaint.New(cli, sc.o.embedded.maint, sc.log.With("component", "etcd-maintenance"), obs)
	}
	abs, _ := filepath.Abs(sc.o.embedded.dataDir)
	sc.where = fmt.Sprintf("embedded etcd at %s, data in %s", strings.Join(sc.endpoints, ","), abs)
	return nil
}
