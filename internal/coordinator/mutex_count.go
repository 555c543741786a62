//go:build lockcount

package coordinator

import (
	"sync"
	"sync/atomic"
)

// engineMutex is, in the lockcount build, a mutex that counts how often
// it is taken.
type engineMutex struct {
	mu    sync.Mutex
	taken atomic.Int64
}

// Lock takes the mutex and counts it.
func (m *engineMutex) Lock() {
	m.taken.Add(1)
	m.mu.Lock()
}

// Unlock releases the mutex.
func (m *engineMutex) Unlock() { m.mu.Unlock() }
