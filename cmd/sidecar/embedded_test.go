//go:build !lean

package main

import (
	"io"
	"testing"

	"github.com/baton-dev/baton/internal/embedetcd"
)

// TestEmbeddedFlagsDefaultToThePackages: serve's flags of the embedded
// etcd, written out in serve.go for the lean build's sake, default to
// embedetcd.Default's values.
func TestEmbeddedFlagsDefaultToThePackages(t *testing.T) {
	flags := newServeCmd(func(string) string { return "" }, io.Discard, io.Discard, func(n int) int { return n }).Flags()
	d := embedetcd.Default("baton-data")
	for name, want := range map[string]string{"data-dir": d.DataDir, "embedded-client-url": d.ClientURL, "embedded-history": d.History.String()} {
		if f := flags.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s defaults to %v, want embedetcd.Default's %s", name, f, want)
		}
	}
}
