//go:build lean && !dapr

package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/baton-dev/baton/internal/coordinator"
)

// The lean build, which every pod not speaking Dapr runs, leaves out
// Dapr's lock API: Dapr's protobuf types would cost each such sidecar
// memory it never uses. baton-dapr (go build -tags lean,dapr), in the
// image as /baton-dapr, has it; the injector runs it for pods annotated
// baton.dev/dapr.

// daprBuilt is nothing: there is no Dapr API to build.
type daprBuilt struct{}

// errNoDapr is the lean build's answer to a Dapr flag.
var errNoDapr = errors.New("--dapr-http-addr, --dapr-grpc-addr: this lean build of baton has no Dapr API; baton-dapr (/baton-dapr in the image, which the injector runs for pods annotated baton.dev/dapr) and the full baton have it")

func (o *daprOptions) validate() error {
	if o.given() {
		return errNoDapr
	}
	return nil
}

func (daprBuilt) listen(*daprOptions) ([]func(), error) { return nil, nil }

func (daprBuilt) build(*daprOptions, *coordinator.Coordinator, *slog.Logger) error { return nil }

func (daprBuilt) serve(context.Context, *sync.WaitGroup, bool, <-chan struct{}, *slog.Logger) {}
