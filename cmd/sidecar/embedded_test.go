//go:build !lean

package main

import (
	"fmt"
	"io"
	"testing"

	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/etcdmaint"
)

// TestEmbeddedFlagsDefaultToThePackages: serve's flags of the embedded
// etcd, written out in serve.go for the lean build's sake, default to
// embedetcd.Default's values.
func TestEmbeddedFlagsDefaultToThePackages(t *testing.T) {
	flags := newServeCmd(func(string) string { return "" }, io.Discard, io.Discard, func(n int) int { return n }).Flags()
	d := embedetcd.Default("baton-data")
	m := etcdmaint.Default()
	for name, want := range map[string]string{"data-dir": d.DataDir, "embedded-client-url": d.ClientURL, "embedded-history": d.History.String(),
		"embedded-quota": fmt.Sprint(d.Quota), "etcd-maintenance-interval": m.Interval.String(), "etcd-defrag-free-ratio": fmt.Sprint(m.FreeRatio),
		"etcd-defrag-min-size": fmt.Sprint(m.MinSize), "etcd-defrag-quota-ratio": fmt.Sprint(m.QuotaRatio)} {
		if f := flags.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s defaults to %v, want embedetcd.Default's %s", name, f, want)
		}
	}
}
