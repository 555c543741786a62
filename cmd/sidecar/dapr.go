//go:build !lean || dapr

package main

// Dapr's lock API in `baton serve`: in the full build and in baton-dapr
// (go build -tags lean,dapr), the lean sidecar of pods that speak Dapr.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/dapr"
	"github.com/baton-dev/baton/internal/server"
)

// validate reads the stores and checks every option; each error names its
// flag.
func (o *daprOptions) validate() error {
	for _, t := range []struct{ flag, addr string }{{"--dapr-http-addr", o.httpAddr}, {"--dapr-grpc-addr", o.grpcAddr}} {
		if t.addr == "" {
			continue
		}
		if _, _, err := dapr.ParseAddr(t.addr); err != nil {
			return fmt.Errorf("%s: %w", t.flag, err)
		}
	}
	if o.httpAddr != "" && o.httpAddr == o.grpcAddr {
		return fmt.Errorf("--dapr-grpc-addr %s: the same address as --dapr-http-addr", o.grpcAddr)
	}
	cfg := dapr.Config{AppID: o.appID}
	for _, s := range o.stores {
		st, err := dapr.ParseStore(s)
		if err != nil {
			return fmt.Errorf("--dapr-store %w", err)
		}
		cfg.Stores = append(cfg.Stores, st)
	}
	if len(cfg.Stores) == 0 {
		cfg.Stores = dapr.DefaultStores()
	}
	if !o.enabled() && o.given() {
		return errors.New("--dapr-store and --dapr-app-id configure Dapr's lock API, which is off: set --dapr-http-addr or --dapr-grpc-addr")
	}
	o.built.cfg = cfg
	return flagError(cfg.Validate())
}

// daprBuilt is the Dapr API of `baton serve`: its configuration, its
// listeners and the API, nil when off.
type daprBuilt struct {
	cfg        dapr.Config
	http, grpc net.Listener
	api        *dapr.API
}

// listen takes the Dapr API's addresses; closers close them.
func (b *daprBuilt) listen(o *daprOptions) (closers []func(), err error) {
	for _, t := range []struct {
		flag, addr string
		l          *net.Listener
	}{{"--dapr-http-addr", o.httpAddr, &b.http}, {"--dapr-grpc-addr", o.grpcAddr, &b.grpc}} {
		if t.addr == "" {
			continue
		}
		network, addr, _ := dapr.ParseAddr(t.addr) // validated with the options
		var (
			l   net.Listener
			err error
		)
		if network == "unix" {
			l, err = server.ListenUnix(addr)
		} else {
			l, err = net.Listen(network, addr)
		}
		if err != nil {
			return closers, fmt.Errorf("%s: %w", t.flag, err)
		}
		*t.l = l
		closers = append(closers, func() { l.Close() })
	}
	return closers, nil
}

// build makes the Dapr API on the coordinator, when on.
func (b *daprBuilt) build(o *daprOptions, coord *coordinator.Coordinator, log *slog.Logger) error {
	if !o.enabled() {
		return nil
	}
	api, err := dapr.New(b.cfg, coord, log.With("api", "dapr"))
	b.api = api
	return flagError(err)
}

// serve serves the Dapr API, when on, until ctx ends. A sidecar taking
// over the locks of the process before it (adopting) serves it once that
// is done (adopted closed): Dapr's API has no "starting" answer, its
// callers' connections wait.
func (b *daprBuilt) serve(ctx context.Context, wg *sync.WaitGroup, adopting bool, adopted <-chan struct{}, log *slog.Logger) {
	api := b.api
	if api == nil {
		return
	}
	open := func() bool { return true }
	if adopting {
		open = func() bool {
			select {
			case <-adopted:
				return true
			case <-ctx.Done():
				return false
			}
		}
	}
	if l := b.http; l != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !open() {
				return
			}
			if err := server.Serve(ctx, dapr.NewHTTPServer(api.Handler(), log), l, 500*time.Millisecond); err != nil {
				log.Error("Dapr HTTP API stopped", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	if l := b.grpc; l != nil {
		g := dapr.NewGRPCServer(api)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if !open() {
				return
			}
			if err := g.Serve(l); err != nil {
				log.Error("Dapr gRPC API stopped", "addr", l.Addr().String(), "err", err)
			}
		}()
		go func() {
			defer wg.Done()
			<-ctx.Done()
			stopped := make(chan struct{})
			go func() { g.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(500 * time.Millisecond):
				g.Stop()
			}
		}()
	}
	log.Info("serving Dapr's lock API", "http", addrOf(b.http), "grpc", addrOf(b.grpc), "stores", b.cfg.Stores, "appID", b.cfg.AppID)
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}
