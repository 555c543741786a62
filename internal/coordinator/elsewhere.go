package coordinator

import "sync"

// seenHeld names the locks that a try found held by another sidecar and
// whose holder's delete has not been seen since: the next try reads
// first, so a refusal costs no etcd write. It has a mutex of its own, so
// that the watch's goroutine, which forgets a lock at each delete under
// it, takes none of the engine's.
type seenHeld struct {
	mu sync.Mutex
	m  map[string]bool
}

// maxHeldElsewhere bounds the memory of locks seen held elsewhere; past it
// the memory starts over (a forgotten lock costs one write on its next
// refusal, nothing more).
const maxHeldElsewhere = 1 << 16

// has reports whether the lock named name was seen held elsewhere.
func (s *seenHeld) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[name]
}

// add notes the lock named name as seen held elsewhere.
func (s *seenHeld) add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxHeldElsewhere {
		s.m = map[string]bool{}
	}
	s.m[name] = true
}

// forget forgets the lock named name: a delete under it was seen.
func (s *seenHeld) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, name)
}

// forgetAll forgets every lock: deletes may have been missed.
func (s *seenHeld) forgetAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.m)
}
