package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// full raises the store's NOSPACE alarm (true) or disarms it: on etcd, the
// very alarm etcd raises when its database reaches its quota.
func (w *world) full(t *testing.T, cli *sidecar, full bool) {
	t.Helper()
	if w.mem != nil {
		w.mem.SetFull(full)
		return
	}
	etcdtest.SetNoSpace(t, cli.cli, full)
}

// TestOutOfSpace: while etcd is out of space, no lock is granted and the
// refusal says why by name; the sidecars turn not ready; a holder keeps
// its lock past its first deadline by extending it (the sidecar keeps the
// new deadline, while the record in etcd shows the one before) and can
// release it. Once room is made, the sidecars turn ready again by
// themselves and grant above every fence granted before.
func TestOutOfSpace(t *testing.T) {
	parallel(t)
	w := newOwnWorld(t)
	a, b := newSidecarOn(t, w, "pod-a"), newSidecarOn(t, w, "pod-b")
	ctx := context.Background()
	held, other := key(t, "flow/held"), key(t, "flow/other")
	const ttl = 3 * time.Second
	g, err := a.c.Acquire(ctx, AcquireRequest{Key: held, Owner: "job", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	let := key(t, "flow/let-go")
	a.mustAcquire(t, let, "job")
	w.full(t, a, true)
	t.Cleanup(func() { w.full(t, a, false) })

	_, err = b.acquire(t, other, "late", 0)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "NOSPACE") || !strings.Contains(err.Error(), "the locks held go on") {
		t.Fatalf("acquire while etcd is out of space: %v; want ErrNoSpace, saying what it means", err)
	}
	if len(b.contenders(t, other)) != 0 {
		t.Fatalf("a refused acquire left keys: %v", b.contenders(t, other))
	}
	waitFor(t, 5*time.Second, "the refused sidecar not ready", func() bool { return errors.Is(b.c.Ready(), ErrNoSpace) })

	// Extended over twice its ttl, the lock outlives its first deadline;
	// its sidecar, refused the record's writes, is not ready meanwhile.
	until := g.ExpiresAt.Add(2 * ttl)
	for time.Now().Before(until) {
		e, err := a.c.Extend(ctx, held, "job", ttl)
		if err != nil {
			t.Fatalf("extend while out of space: %v", err)
		}
		if !e.ExpiresAt.After(g.ExpiresAt) || e.Fence != g.Fence {
			t.Fatalf("extend while out of space: %+v, want a later deadline than %v, fence %d", e, g.ExpiresAt, g.Fence)
		}
		time.Sleep(ttl / 3)
	}
	if !errors.Is(a.c.Ready(), ErrNoSpace) {
		t.Errorf("the holder's sidecar, refused its writes, is ready: %v", a.c.Ready())
	}
	first := a.first(t, held)
	if first == nil || first.Create != g.Fence {
		t.Fatalf("the lock was lost past its first deadline while extended: %+v", first)
	}
	if !first.Holder.ExpiresAt.Equal(g.ExpiresAt.UTC()) {
		t.Errorf("the record's deadline = %v, want the one etcd took last, %v", first.Holder.ExpiresAt, g.ExpiresAt)
	}
	kept, err := a.c.Extend(ctx, held, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Release(ctx, let, "job"); err != nil {
		t.Fatalf("release while out of space: %v", err)
	}

	w.full(t, a, false)
	for _, s := range []*sidecar{a, b} {
		waitFor(t, 10*time.Second, "ready once room is made", func() bool { return s.c.Ready() == nil })
	}
	// The deadline kept by the sidecar alone is written into the record.
	waitFor(t, 10*time.Second, "the record's deadline written once room is made", func() bool {
		f := a.first(t, held)
		return f != nil && f.Holder.ExpiresAt.Equal(kept.ExpiresAt.UTC())
	})
	if _, err := a.c.Release(ctx, held, "job"); err != nil {
		t.Fatalf("release: %v", err)
	}
	g2 := b.mustAcquire(t, other, "late")
	if g2.Fence <= g.Fence {
		t.Fatalf("fence %d after the alarm, want above %d", g2.Fence, g.Fence)
	}
}
