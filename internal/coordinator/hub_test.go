package coordinator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// fakeWatches serves the hub's watches from deletes the test makes: each
// watch is established at the current revision and gets every delete under
// its prefix from the revision it asked for on. Only Watch is served (the
// hub calls nothing else), so that the test decides every revision.
type fakeWatches struct {
	lockstore.Watches

	mu      sync.Mutex
	rev     int64
	deleted []lockstore.Deletion
	subs    map[*fakeWatch]bool
	open    atomic.Int64 // watches not ended
	full    atomic.Bool  // a watch's buffer was full: a delete went undelivered
}

type fakeWatch struct {
	pfx string
	ch  chan lockstore.WatchResponse
}

func newFakeWatches() *fakeWatches { return &fakeWatches{subs: map[*fakeWatch]bool{}} }

// Watch opens a watch on prefix from revision from (0: now).
func (f *fakeWatches) Watch(ctx context.Context, prefix string, from int64) <-chan lockstore.WatchResponse {
	w := &fakeWatch{pfx: prefix, ch: make(chan lockstore.WatchResponse, 4096)}
	f.mu.Lock()
	w.ch <- lockstore.WatchResponse{Established: true, Rev: f.rev}
	for _, d := range f.deleted {
		if from > 0 && d.Rev >= from && strings.HasPrefix(d.Key, prefix) {
			f.send(w, d)
		}
	}
	f.subs[w] = true
	f.open.Add(1)
	f.mu.Unlock()
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		delete(f.subs, w)
		close(w.ch)
		f.open.Add(-1)
		f.mu.Unlock()
	}()
	return w.ch
}

// delete deletes key, delivered to the watches on its prefix, and returns
// its revision.
func (f *fakeWatches) delete(key string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	d := lockstore.Deletion{Key: key, Rev: f.rev}
	f.deleted = append(f.deleted, d)
	for w := range f.subs {
		if strings.HasPrefix(key, w.pfx) {
			f.send(w, d)
		}
	}
	return d.Rev
}

func (f *fakeWatches) send(w *fakeWatch, d lockstore.Deletion) {
	select {
	case w.ch <- lockstore.WatchResponse{Rev: d.Rev, Deleted: []lockstore.Deletion{d}}:
	default:
		f.full.Store(true)
	}
}

// heard is what a hub reported: the keys deleted, and for each lock (the
// zero key: every lock), the latest revision it was established again
// from.
type heard struct {
	mu      sync.Mutex
	deleted map[string]bool
	resync  map[keyspace.Key]int64
}

func newHeard() *heard {
	return &heard{deleted: map[string]bool{}, resync: map[keyspace.Key]int64{}}
}

// newTestHub is a hub of scope on f, reporting to r, with the linger and
// the room for lock watches given; the test runs it.
func newTestHub(t *testing.T, scope string, f *fakeWatches, r *heard, linger time.Duration, maxLocks int) *hub {
	t.Helper()
	layout, err := keyspace.NewLayout(scope)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return newHub(f, layout, log, clockwork.NewRealClock(), linger, maxLocks, r.onDelete, r.onResync)
}

func (r *heard) onDelete(_ keyspace.Key, key string, _ int64) {
	r.mu.Lock()
	r.deleted[key] = true
	r.mu.Unlock()
}

func (r *heard) onResync(k keyspace.Key, from int64) {
	r.mu.Lock()
	r.resync[k] = max(r.resync[k], from)
	r.mu.Unlock()
}

// of reports whether the delete of key, of lock k, at revision rev was
// reported, or a resync of k after it had k's holders read again.
func (r *heard) of(k keyspace.Key, key string, rev int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted[key] || r.resync[k] > rev || r.resync[keyspace.Key{}] > rev
}

// TestHubUnderChurn: callers needing, registering with and letting go of
// the watches of a few locks, from many goroutines, with room for 4 lock
// watches, so that the hub switches to the scope's watch and back all the
// while. Throughout, a lock needed from before the hub runs hears every
// delete under it (or is told to read again after it), and a registered
// waiter hears every delete after it read; once everything is let go,
// every watch closes and the hub forgets every lock.
func TestHubUnderChurn(t *testing.T) {
	t.Parallel()
	f, r := newFakeWatches(), newHeard()
	h := newTestHub(t, "churn", f, r, 20*time.Millisecond, 4)
	layout := h.layout
	sentinel := key(t, "sentinel")
	churned := make(chan struct{})
	h.need(sentinel, 0) // before Run: Run starts its watch
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = h.run(ctx)
	}()
	defer func() {
		cancel()
		<-ran
		<-churned
	}()

	var keys []keyspace.Key
	for i := range 10 {
		keys = append(keys, key(t, fmt.Sprintf("churn-%d", i)))
	}
	var switches atomic.Int64
	go func() { // how often the scope's watch took over
		defer close(churned)
		var was *lockWatch
		for ctx.Err() == nil {
			if sc := h.scope.Load(); sc != was {
				was = sc
				switches.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	heardAll, stop := make(chan struct{}), make(chan struct{})
	go func() { // the needed lock's deletes, all through the churn
		defer close(heardAll)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			gone := layout.ContenderKey(sentinel, int64(i))
			rev := f.delete(gone)
			if !eventually(5*time.Second, func() bool { return r.of(sentinel, gone, rev) }) {
				t.Errorf("the needed lock did not hear of the delete of %s at %d", gone, rev)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	const rounds, ops = 6, 25
	var n atomic.Int64
	for round := range rounds {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				for i := range ops {
					churn(t, h, f, keys[rnd.IntN(len(keys))], rnd, int64(round*10000+g*100+i))
					n.Add(1)
				}
			})
		}
		wg.Wait()
		time.Sleep(80 * time.Millisecond) // the scope's watch, no longer needed, ends
	}
	close(stop)
	<-heardAll
	h.unneed(sentinel)
	t.Logf("%d operations; the scope's watch took over or ended %d times", n.Load(), switches.Load())
	if switches.Load() < rounds {
		t.Errorf("the scope's watch took over or ended %d times in %d rounds: the churn did not switch watches", switches.Load(), rounds)
	}
	if f.full.Load() {
		t.Fatal("a watch's buffer filled: the test lost deletes")
	}

	waitFor(t, 5*time.Second, "every watch closed, and every lock forgotten", func() bool {
		locks := 0
		h.locks.Range(func(any, any) bool { locks++; return true })
		return f.open.Load() == 0 && h.scope.Load() == nil && locks == 0 && h.needed.Load() == 0
	})
	if h.broken() {
		t.Error("a watch is reported failing after they all closed")
	}
	// And the hub still works: a lock needed now is watched.
	w := h.register(keys[0])
	read := f.rev0()
	gone := layout.ContenderKey(keys[0], 1<<20)
	f.delete(gone)
	waitFor(t, 5*time.Second, "a waiter registered after the churn hearing a delete", func() bool { return w.heard(gone, read) })
	h.done(keys[0], w, false)
	cancel()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the hub did not stop")
	}
}

// TestHubStopsUnderChurn: needs made as the hub stops start no watch
// after it stopped, and its stop waits for every watch it started.
func TestHubStopsUnderChurn(t *testing.T) {
	t.Parallel()
	f, r := newFakeWatches(), newHeard()
	for round := range 20 {
		h := newTestHub(t, "stop", f, r, 5*time.Millisecond, 2)
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- h.run(ctx) }()
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 50 {
					k := key(t, fmt.Sprintf("stop-%d", (g+i)%5))
					h.need(k, 0)
					h.unneed(k)
				}
			})
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		cancel()
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("the hub did not stop")
		}
		wg.Wait()
		waitFor(t, 5*time.Second, "every watch closed", func() bool { return f.open.Load() == 0 })
		h.locks.Range(func(_, v any) bool {
			lw := v.(*lockWatch)
			lw.mu.Lock()
			if lw.running {
				t.Errorf("round %d: lock %s's watch runs after the hub stopped", round, lw.key)
			}
			lw.mu.Unlock()
			return true
		})
	}
}

// churn is one caller's use of lock k's watch, as the engine's: a need
// (a caller in line for the turn), a held lock's, a waiter's in line then
// queued, or a waiter registered that must hear of a delete after it read.
func churn(t *testing.T, h *hub, f *fakeWatches, k keyspace.Key, rnd *rand.Rand, id int64) {
	pause := time.Duration(rnd.IntN(3000)) * time.Microsecond
	switch rnd.IntN(4) {
	case 0:
		h.need(k, 0)
		time.Sleep(pause)
		h.unneed(k)
	case 1:
		inScope := h.watchHeld(k, 0)
		time.Sleep(pause)
		h.unwatchHeld(k, inScope)
	case 2:
		h.need(k, 0)
		time.Sleep(pause)
		w := h.register(k)
		h.done(k, w, true)
	default:
		w := h.register(k)
		read := f.rev0()
		gone := h.layout.ContenderKey(k, id)
		f.delete(gone)
		if !eventually(5*time.Second, func() bool { return w.heard(gone, read) }) {
			t.Errorf("a waiter registered for %s did not hear of the delete of %s", k, gone)
		}
		h.done(k, w, false)
	}
}

// eventually reports whether cond came true within d.
func eventually(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// rev0 is the current revision: what a read now would see.
func (f *fakeWatches) rev0() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

// heard reports whether w was told of the delete of key, or that the
// watch had a gap after a read at revision read (it must read again).
func (w *waiter) heard(key string, read int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.gone[key]
	return ok || (w.resync && w.from > read+1)
}
