//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/etcdmaint"
)

// defragLog keeps, in order, the defragmentations a maintainer made.
type defragLog struct {
	mu    sync.Mutex
	order []string
	took  []time.Duration
	errs  []error
}

func (l *defragLog) Saw([]etcdmaint.Member) {}
func (l *defragLog) Defragmented(m string, _ etcdmaint.Reason, took time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order, l.took = append(l.order, m), append(l.took, took)
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("%s: %w", m, err))
	}
}

// TestS23DefragmentUnderLoad: Baton's etcd maintenance defragments every
// member of a 3-member cluster, its files fragmented, while 64 clients on
// 8 sidecars take turns on 16 locks with hold streams: the followers
// first and the leader last, one at a time; no holder loses its lock, no
// session is lost, the fence and store invariants hold. The grant latency
// while members were defragmented is reported beside the one before.
func TestS23DefragmentUnderLoad(t *testing.T) {
	e := newEnv(t, envOptions{cluster: true})
	// Fragment the members' files: written, deleted, compacted.
	ctx := context.Background()
	v := strings.Repeat("x", 32<<10)
	for i := range scale(300, 1500) {
		if _, err := e.cli.Put(ctx, fmt.Sprintf("/s23/junk/%d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	del, err := e.cli.Delete(ctx, "/s23/junk/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	apps := e.startClients(8, 8, 5*time.Millisecond)
	stop := make(chan struct{})
	// Each lock's four clients are on four sidecars.
	groups := make([][]*app, 16)
	for j, a := range apps {
		groups[j%16] = append(groups[j%16], a)
	}
	var wgs []*sync.WaitGroup
	for i, g := range groups {
		wgs = append(wgs, runApps(g, stop, fmt.Sprintf("s23-%d", i), 0,
			holdPlan{wait: 10 * time.Second, increments: 1, holdFor: 100 * time.Millisecond, pause: 20 * time.Millisecond}))
	}
	time.Sleep(scale(3*time.Second, 20*time.Second))

	leader := e.cluster.members[e.cluster.leader(t, e.cli)].spec.Name
	cfg := etcdmaint.Default()
	cfg.MinSize = 1 << 20
	var log defragLog
	m, err := etcdmaint.New(e.cli, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), &log)
	if err != nil {
		t.Fatal(err)
	}
	from := e.h.now()
	r, err := m.Pass(ctx)
	to := e.h.now()
	if err != nil {
		t.Fatalf("maintenance pass: %v", err)
	}
	time.Sleep(scale(2*time.Second, 10*time.Second))
	close(stop)
	for _, wg := range wgs {
		wg.Wait()
	}
	if len(log.order) != 3 || log.order[2] != leader || len(log.errs) != 0 {
		t.Errorf("defragmentations %v (errors %v), want the three members, the leader %s last", log.order, log.errs, leader)
	}
	var before, during []time.Duration
	for _, op := range e.h.snapshot() {
		if op.Kind != opAcquire || op.Result != resOK {
			continue
		}
		switch d := op.Return - op.Call; {
		case op.Call < from:
			before = append(before, d)
		case op.Call <= to:
			during = append(during, d)
		}
	}
	sizes := make([]string, len(r.Members))
	for i, mem := range r.Members {
		sizes[i] = fmt.Sprintf("%s %.1f MiB (%.1f in use)", mem.Name, float64(mem.Size)/(1<<20), float64(mem.InUse)/(1<<20))
	}
	e.finish("S23 every etcd member defragmented under load", requirements{noOverlap: true, minOK: 100}, func(o *outcome) {
		for reason, n := range o.losses {
			if n > 0 {
				t.Errorf("%d holders lost their lock (%s) while etcd was defragmented", n, reason)
			}
		}
		o.note("defragmented %v (leader %s last) in %s, each %v; files before: %s", log.order, leader, fmtDur(to-from), log.took, strings.Join(sizes, ", "))
		o.note("grant latency p50/p99: before %s (%d grants), during the defragmentations %s (%d grants)",
			quantiles(before, 0.5, 0.99), len(before), quantiles(during, 0.5, 0.99), len(during))
	})
}
