//go:build !lean

package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/baton-dev/baton/internal/embedetcd"
)

// validateEmbedded checks the embedded etcd's flags, for a serve without
// --etcd-endpoints.
func validateEmbedded(dataDir, clientURL string) error {
	cfg := embedetcd.Default(dataDir)
	cfg.ClientURL = clientURL
	if err := cfg.Validate(); err != nil {
		return flagError(err)
	}
	return nil
}

// startEmbedded starts the embedded etcd of a serve without
// --etcd-endpoints and sets the sidecar's endpoints to it.
func (sc *sidecar) startEmbedded(ctx context.Context) error {
	cfg := embedetcd.Default(sc.o.dataDir)
	cfg.ClientURL, cfg.Logger = sc.o.clientURL, sc.logs.etcdServer
	e, err := embedetcd.Start(ctx, cfg)
	if errors.Is(err, syscall.EADDRINUSE) {
		return usageError{fmt.Errorf("--embedded-client-url %s: the port is in use (another etcd, or another baton serve?): choose another, or join that etcd with --etcd-endpoints: %w", sc.o.clientURL, err)}
	}
	if err != nil {
		return err
	}
	sc.closers = append(sc.closers, func() {
		sc.logs.quiet() // its shutdown logs errors that are none
		e.Close()
	})
	sc.endpoints = e.Endpoints()
	abs, _ := filepath.Abs(sc.o.dataDir)
	sc.where = fmt.Sprintf("embedded etcd at %s, data in %s", strings.Join(sc.endpoints, ","), abs)
	return nil
}
