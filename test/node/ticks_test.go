package node

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tickStore is the fenced store the elector's leaders write to: each
// leader's command appends "tick POD FENCE" to one file on the node every
// 100 ms, and the store reads the lines in the order they were written,
// as a store of the app's would take its writes. A tick is accepted when
// its fence is at least the highest seen, and refused as stale otherwise:
// an older leader still writing after a newer one wrote. The accepted
// ticks are the leaderships, one after another, each with a larger fence;
// the refused ones are the overlaps that only the fence caught. It stamps
// each line when it reads it (it reads every 20 ms): the pods' busybox has
// no clock finer than a second.
type tickStore struct {
	path string
	stop chan struct{}
	done chan struct{}

	mu          sync.Mutex
	leaderships []*leadership
	pods        map[int64]string // each fence's pod
	stale       []staleTick
	bad         []string // lines that are not ticks, and fences ticked by two pods
}

// leadership is one leader's run of accepted ticks.
type leadership struct {
	pod         string
	fence       int64
	first, last time.Time // its first and last accepted tick
	// gap is the time without a leader before it: from the previous
	// leadership's last accepted tick to its first.
	gap time.Duration
}

// staleTick is a tick the fence refused.
type staleTick struct {
	pod   string
	fence int64
	at    time.Time
}

// newTickStore reads path until the test ends.
func newTickStore(t *testing.T, path string) *tickStore {
	t.Helper()
	s := &tickStore{path: path, stop: make(chan struct{}), done: make(chan struct{}), pods: map[int64]string{}}
	go s.read()
	t.Cleanup(func() { close(s.stop); <-s.done })
	return s
}

func (s *tickStore) read() {
	defer close(s.done)
	var f *os.File
	var partial []byte
	buf := make([]byte, 64<<10)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			if f != nil {
				f.Close()
			}
			return
		case <-tick.C:
		}
		if f == nil {
			var err error
			if f, err = os.Open(s.path); err != nil {
				continue
			}
		}
		for {
			n, err := f.Read(buf)
			partial = append(partial, buf[:n]...)
			if n == 0 || err == io.EOF || err != nil {
				break
			}
		}
		now := time.Now()
		for {
			i := bytes.IndexByte(partial, '\n')
			if i < 0 {
				break
			}
			s.take(string(partial[:i]), now)
			partial = partial[i+1:]
		}
	}
}

// take decides on one line read at now.
func (s *tickStore) take(line string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "tick" {
		s.bad = append(s.bad, line)
		return
	}
	fence, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || fence <= 0 {
		s.bad = append(s.bad, line)
		return
	}
	pod := f[1]
	if was, ok := s.pods[fence]; ok && was != pod {
		s.bad = append(s.bad, fmt.Sprintf("%s: fence %d ticked by %s and by %s", line, fence, was, pod))
	}
	n := len(s.leaderships)
	switch {
	case n > 0 && fence == s.leaderships[n-1].fence:
		s.leaderships[n-1].last = now
	case n > 0 && fence < s.leaderships[n-1].fence:
		s.stale = append(s.stale, staleTick{pod, fence, now})
	default:
		s.pods[fence] = pod
		l := &leadership{pod: pod, fence: fence, first: now, last: now}
		if n > 0 {
			l.gap = now.Sub(s.leaderships[n-1].last)
		}
		s.leaderships = append(s.leaderships, l)
	}
}

// current is the latest leadership, if its last tick is recent: a leader
// that is leading now.
func (s *tickStore) current() (leadership, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.leaderships); n > 0 && time.Since(s.leaderships[n-1].last) < time.Second {
		return *s.leaderships[n-1], true
	}
	return leadership{}, false
}

// after waits up to d for a leadership with a larger fence than fence,
// and returns the first such.
func (s *tickStore) after(fence int64, d time.Duration) (leadership, bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		for _, l := range s.leaderships {
			if l.fence > fence {
				s.mu.Unlock()
				return *l, true
			}
		}
		s.mu.Unlock()
	}
	return leadership{}, false
}

// refused is the ticks the fence refused.
func (s *tickStore) refused() []staleTick {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]staleTick(nil), s.stale...)
}

// since is the leaderships from the one with fence from on.
func (s *tickStore) since(from int64) []leadership {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []leadership
	for _, l := range s.leaderships {
		if l.fence >= from {
			out = append(out, *l)
		}
	}
	return out
}

// lines that are not ticks, or a fence ticked by two pods.
func (s *tickStore) badLines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bad...)
}
