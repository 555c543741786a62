package memstore

import (
	"context"
	"strings"
	"sync"

	"github.com/baton-dev/baton/internal/lockstore"
)

// memWatch is one Watch of a Store. The store queues its responses
// without waiting (it holds its lock); a goroutine hands them on.
type memWatch struct {
	prefix string
	all    bool // WatchAll: writes too
	wake   chan struct{}

	mu    sync.Mutex
	queue []lockstore.WatchResponse
}

// send queues r.
func (w *memWatch) send(r lockstore.WatchResponse) {
	w.mu.Lock()
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// fail ends the watch with err.
func (w *memWatch) fail(err error) { w.send(lockstore.WatchResponse{Err: err}) }

// Watch implements lockstore.Store.
func (m *Store) Watch(ctx context.Context, prefix string, from int64) <-chan lockstore.WatchResponse {
	return m.watch(ctx, &memWatch{prefix: prefix, wake: make(chan struct{}, 1)}, from)
}

// WatchAll implements lockstore.Store.
func (m *Store) WatchAll(ctx context.Context, prefix string, from int64) <-chan lockstore.WatchResponse {
	return m.watch(ctx, &memWatch{prefix: prefix, all: true, wake: make(chan struct{}, 1)}, from)
}

// Snapshot implements lockstore.Store.
func (m *Store) Snapshot(ctx context.Context, prefix string) (cs []lockstore.Contender, rev int64, err error) {
	err = m.read(ctx, func() { cs, rev = m.keys.under(prefix), m.rev })
	return cs, rev, err
}

// respond sends w the change c, if w wants it.
func (w *memWatch) respond(c lockstore.Change) {
	switch {
	case !strings.HasPrefix(c.Key, w.prefix):
	case c.Deleted && w.all:
		w.send(lockstore.WatchResponse{Rev: c.Rev, Deleted: []lockstore.Deletion{{Key: c.Key, Rev: c.Rev}}, Changes: []lockstore.Change{c}})
	case c.Deleted:
		w.send(lockstore.WatchResponse{Rev: c.Rev, Deleted: []lockstore.Deletion{{Key: c.Key, Rev: c.Rev}}})
	case w.all:
		w.send(lockstore.WatchResponse{Rev: c.Rev, Changes: []lockstore.Change{c}})
	}
}

func (m *Store) watch(ctx context.Context, w *memWatch, from int64) <-chan lockstore.WatchResponse {
	m.mu.Lock()
	switch {
	case m.down:
		w.fail(ErrDown)
	case from > 0 && from <= m.forgot:
		w.send(lockstore.WatchResponse{Compacted: true})
	default:
		w.send(lockstore.WatchResponse{Established: true, Rev: m.rev})
		for _, c := range m.history {
			if from > 0 && c.Rev >= from {
				w.respond(c)
			}
		}
		m.watches[w] = true
	}
	m.mu.Unlock()
	out := make(chan lockstore.WatchResponse)
	go func() {
		defer close(out)
		defer func() {
			m.mu.Lock()
			delete(m.watches, w)
			m.mu.Unlock()
		}()
		for {
			w.mu.Lock()
			q := w.queue
			w.queue = nil
			w.mu.Unlock()
			for _, r := range q {
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
				if r.Err != nil || r.Compacted {
					return
				}
			}
			select {
			case <-w.wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
