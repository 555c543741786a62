//go:build lean

package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"
)

// The lean build (go build -tags lean, bin/baton-sidecar, the sidecar in
// the image) is what runs in every pod: serve on an external etcd, run,
// locks, install and version. It leaves out the embedded etcd and the
// controller (baton mirror), whose libraries would cost every pod's
// sidecar memory it never uses.

// errNoEmbedded is the lean build's answer to a serve without etcd.
var errNoEmbedded = errors.New("--etcd-endpoints: required by this lean build of baton, which has no embedded etcd (the full baton binary starts one)")

func validateEmbedded(embeddedOptions) error { return usageError{errNoEmbedded} }

func (sc *sidecar) startEmbedded(context.Context) error { return usageError{errNoEmbedded} }

// kubeCommands are the controller's commands: none in the lean build.
func kubeCommands(func(string) string, io.Writer, io.Writer) []*cobra.Command { return nil }
