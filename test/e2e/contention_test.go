//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestS1Contention: 8 sidecars × 8 app clients fight over one lock, each
// holder doing a fenced read-sleep-write. Fault-free, so the history must be
// linearizable and no two beliefs may overlap.
func TestS1Contention(t *testing.T) {
	e := newEnv(t, envOptions{})
	per := scale(16, 64)
	apps := e.startClients(8, 8, 20*time.Millisecond)
	start := time.Now()
	runApps(apps, nil, "s1", per, holdPlan{wait: 2 * time.Minute, increments: 1}).Wait()
	took := time.Since(start)
	e.finish("S1 contention", requirements{linearizable: true, noOverlap: true, minOK: len(apps) * per}, func(o *outcome) {
		o.note("%d clients on %d sidecars, %.0f acquisitions/s (each holder sleeps 0–20 ms between its fenced read and write, etcd fsyncs every write)", len(apps), len(e.sidecars), float64(o.ok)/took.Seconds())
	})
}
