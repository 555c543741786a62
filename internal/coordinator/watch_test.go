package coordinator

import (
	"context"
	"testing"
	"time"
)

// watchOpen reports whether the sidecar's scope watch is established.
func (s *sidecar) watchOpen() bool {
	s.c.hub.mu.Lock()
	defer s.c.hub.mu.Unlock()
	return s.c.hub.ok
}

// keepWatching has s hold a lock of its own, so that its scope watch is
// open before a test counts its etcd calls (a watch opened after a read
// makes the reader read again).
func (s *sidecar) keepWatching(t *testing.T) {
	t.Helper()
	s.mustAcquire(t, key(t, "keep-watching-"+s.c.cfg.Identity.Pod), "watcher")
	waitFor(t, 5*time.Second, "the scope watch", s.watchOpen)
}

// TestWatchOnlyWhileNeeded: an idle sidecar does not watch its scope (it
// would receive every delete in it); holding or awaiting a lock opens the
// watch, which closes a linger after the last lock ends; deletes in the
// meantime are heard.
func TestWatchOnlyWhileNeeded(t *testing.T) {
	const linger = 200 * time.Millisecond
	short := func(c *Config) { c.WatchLinger = linger }
	a, b := newSidecar(t, "pod-a", short), newSidecar(t, "pod-b", short)
	ctx := context.Background()
	time.Sleep(2 * linger)
	if a.watchOpen() || b.watchOpen() {
		t.Fatal("idle sidecars watch their scope")
	}

	// A holder opens the watch and hears a force release.
	k := key(t, "lazy")
	g := a.mustAcquire(t, k, "victim")
	waitFor(t, 5*time.Second, "the holder's watch", a.watchOpen)
	if b.watchOpen() {
		t.Error("a sidecar that holds nothing watches")
	}
	if _, err := a.cli.Delete(ctx, a.contenders(t, k)[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told its key was deleted")
	}
	if _, err := a.c.Release(ctx, k, "victim"); err == nil {
		t.Fatal("release of a force-released lock succeeded")
	}
	waitFor(t, 5*time.Second, "the watch to close after the linger", func() bool { return !a.watchOpen() })

	// A waiter on an idle sidecar is handed the lock.
	handOff(t, a, b, k, 0)
	if !b.watchOpen() {
		t.Error("a holder's watch is closed")
	}
	if _, err := b.c.Release(ctx, k, "second"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "both watches closed", func() bool { return !a.watchOpen() && !b.watchOpen() })
	if err := a.c.Ready(); err != nil {
		t.Errorf("an idle sidecar is not ready: %v", err)
	}
}

// TestConfigWatchLinger: the linger must be at least 10ms.
func TestConfigWatchLinger(t *testing.T) {
	c := Default()
	c.WatchLinger = time.Millisecond
	if err := c.Validate(); err == nil {
		t.Error("a 1ms watch linger is valid")
	}
}
