//go:build lockcount

package coordinator

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// engineMutex is, in the lockcount build, a mutex that counts how often
// it is taken and, while tracing, by whom.
type engineMutex struct {
	mu    sync.Mutex
	taken atomic.Int64

	tracing atomic.Bool
	tmu     sync.Mutex
	takers  []string // "function (caller)" of each Lock while tracing
}

// Lock takes the mutex and counts it.
func (m *engineMutex) Lock() {
	m.taken.Add(1)
	if m.tracing.Load() {
		m.note()
	}
	m.mu.Lock()
}

// Unlock releases the mutex.
func (m *engineMutex) Unlock() { m.mu.Unlock() }

// TryLock takes the mutex if it is free, and counts it then.
func (m *engineMutex) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	m.taken.Add(1)
	return true
}

// trace starts (on) or stops noting who takes the mutex, and returns who
// took it since it last started.
func (m *engineMutex) trace(on bool) []string {
	m.tmu.Lock()
	defer m.tmu.Unlock()
	took := m.takers
	m.takers = nil
	m.tracing.Store(on)
	return took
}

// note records the function that took the mutex, and its caller.
func (m *engineMutex) note() {
	var pcs [3]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	var names []string
	for {
		f, more := frames.Next()
		names = append(names, fmt.Sprintf("%s:%d", shortFunc(f.Function), f.Line))
		if !more {
			break
		}
	}
	m.tmu.Lock()
	m.takers = append(m.takers, fmt.Sprint(names))
	m.tmu.Unlock()
}

// shortFunc is a function's name without its package path.
func shortFunc(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			return name[i+1:]
		}
	}
	return name
}
