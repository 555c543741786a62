package coordinator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
)

// hub is the sidecar's one watch on its scope's prefix. It feeds the local
// waiters (one per lock: the owner of the turn) and reports deleted keys.
// Watching from the current revision matters: etcd serves a watch that
// starts in the past only every 100 ms, which caps hand-off rates.
type hub struct {
	cli      *clientv3.Client
	layout   keyspace.Layout
	log      *slog.Logger
	onDelete func(k keyspace.Key, key string, modRev int64)
	onResync func()

	mu   sync.Mutex
	regs map[string]*waiter // by lock prefix
	ok   bool               // the watch is established
}

// waiter is a local waiter's view of the deletes under its lock's prefix.
type waiter struct {
	notify chan struct{} // level-triggered: something to look at
	mu     *sync.Mutex   // the hub's, guarding gone and resync
	gone   map[string]deletion
	resync bool
}

// deletion is a contender key's delete seen by the watch.
type deletion struct{ modRev int64 }

func newHub(cli *clientv3.Client, layout keyspace.Layout, log *slog.Logger, onDelete func(k keyspace.Key, key string, modRev int64), onResync func()) *hub {
	return &hub{cli: cli, layout: layout, log: log, onDelete: onDelete, onResync: onResync, regs: map[string]*waiter{}}
}

func (h *hub) register(pfx string) *waiter {
	w := &waiter{notify: make(chan struct{}, 1), mu: &h.mu, gone: map[string]deletion{}}
	h.mu.Lock()
	h.regs[pfx] = w
	h.mu.Unlock()
	return w
}

func (h *hub) unregister(pfx string, w *waiter) {
	h.mu.Lock()
	if h.regs[pfx] == w {
		delete(h.regs, pfx)
	}
	h.mu.Unlock()
}

// deleted reports whether key, or any key of anyOf, was deleted after
// revision rev, or whether the watch had a gap (after which everything
// must be read again). It forgets the deletes that a read at rev has seen.
func (w *waiter) deleted(key string, rev int64, anyOf map[string]bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.resync {
		w.resync = false
		return true
	}
	hit := false
	for k, d := range w.gone {
		switch {
		case d.modRev <= rev:
			delete(w.gone, k)
		case k == key, anyOf[k]:
			hit = true
		}
	}
	return hit
}

// onlyAheadGone reports, for a waiter whose only contender ahead at
// revision rev was pred, that the watch has delivered pred's delete and not
// mine's: the waiter is first in line as of that delete. Nothing created
// after rev can get ahead of it (create revisions only grow), and the watch
// delivers every delete under the prefix in revision order, its own key's
// included, so no read is needed to know it. After a gap in the watch it
// answers false, and the waiter reads.
func (w *waiter) onlyAheadGone(pred, mine string, rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.resync {
		return false
	}
	d, ok := w.gone[pred]
	if !ok || d.modRev <= rev {
		return false
	}
	m, ok := w.gone[mine]
	return !ok || m.modRev <= rev
}

func (h *hub) watching() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok
}

// run keeps the watch open until ctx ends, resuming after the last revision
// seen; after a compaction it starts afresh and has every waiter read again.
func (h *hub) run(ctx context.Context) error {
	var next int64 // 0: from now
	for ctx.Err() == nil {
		// No previous values: etcd would read each deleted key's last
		// version from its backend, for every watching sidecar; revoking a
		// lease with thousands of keys then stalls it. The key and the
		// delete's revision are enough (see onDelete).
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify(), clientv3.WithProgressNotify()}
		if next > 0 {
			opts = append(opts, clientv3.WithRev(next))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range h.cli.Watch(wctx, h.layout.Base(), opts...) {
			if resp.CompactRevision != 0 {
				h.log.Warn("watch fell behind a compaction; reading everything again", "compactRevision", resp.CompactRevision)
				next = 0
				break
			}
			if err := resp.Err(); err != nil {
				h.log.Warn("watch failed; resuming", "err", err, "revision", next)
				break
			}
			if resp.Created {
				if next == 0 {
					next = resp.Header.Revision + 1
				}
				h.established()
				continue
			}
			for _, ev := range resp.Events {
				next = ev.Kv.ModRevision + 1
				if ev.Type == clientv3.EventTypeDelete {
					h.dispatch(ev)
				}
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= next {
				next = resp.Header.Revision + 1
			}
		}
		cancel()
		h.mu.Lock()
		h.ok = false
		h.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// established marks the watch open and makes everyone read again: deletes
// before it may have been missed.
func (h *hub) established() {
	h.mu.Lock()
	h.ok = true
	for _, w := range h.regs {
		w.resync = true
		poke(w.notify)
	}
	h.mu.Unlock()
	go h.onResync()
}

func (h *hub) dispatch(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	k, pfx, ok := h.layout.ParseContender(key)
	if !ok {
		return
	}
	modRev := ev.Kv.ModRevision
	h.mu.Lock()
	if w := h.regs[pfx]; w != nil {
		w.gone[key] = deletion{modRev: modRev}
		poke(w.notify)
	}
	h.mu.Unlock()
	h.onDelete(k, key, modRev)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
