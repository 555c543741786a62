package lockstore

import (
	"context"
	"strings"
	"sync"
)

// memWatch is one Watch of a Memory. The store queues its responses
// without waiting (it holds its lock); a goroutine hands them on.
type memWatch struct {
	prefix string
	wake   chan struct{}

	mu    sync.Mutex
	queue []WatchResponse
}

// send queues r.
func (w *memWatch) send(r WatchResponse) {
	w.mu.Lock()
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// fail ends the watch with err.
func (w *memWatch) fail(err error) { w.send(WatchResponse{Err: err}) }

// Watch implements Store.
func (m *Memory) Watch(ctx context.Context, prefix string, from int64) <-chan WatchResponse {
	w := &memWatch{prefix: prefix, wake: make(chan struct{}, 1)}
	m.mu.Lock()
	switch {
	case m.down:
		w.fail(ErrDown)
	case from > 0 && from <= m.forgot:
		w.send(WatchResponse{Compacted: true})
	default:
		w.send(WatchResponse{Established: true, Rev: m.rev})
		for _, d := range m.history {
			if from > 0 && d.Rev >= from && strings.HasPrefix(d.Key, prefix) {
				w.send(WatchResponse{Rev: d.Rev, Deleted: []Deletion{d}})
			}
		}
		m.watches[w] = true
	}
	m.mu.Unlock()
	out := make(chan WatchResponse)
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
