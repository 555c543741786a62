package policy

import (
	"io"
	"log/slog"
	"testing"
)

// BenchmarkCheck is the policy's cost on every acquire: with no policy
// (the default), and with a namespace's policies of a few rules each.
func BenchmarkCheck(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, bc := range []struct {
		name string
		doc  Document
	}{
		{"none", Document{}},
		{"3-policies", Document{Policies: []Policy{
			{Name: "pipelines", Rules: []Rule{{ServiceAccounts: []string{"runner", "deployer"}, Keys: []string{"tf/", "deploy-"}, ForceRelease: true}}},
			{Name: "tenants", Rules: []Rule{{ServiceAccounts: []string{"worker"}, Keys: []string{"tenant-a/", "tenant-b/", "tenant-c/"}}}},
			{Name: "shared", Rules: []Rule{{ServiceAccounts: []string{"*"}, Keys: []string{"shared/"}}}},
		}}},
	} {
		g := NewGuard("worker", "bench", log, nil)
		g.Set(bc.doc, "1")
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := g.Check(Lock, "tenant-c/nightly/report"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
