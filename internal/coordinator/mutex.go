//go:build !lockcount

package coordinator

import "sync"

// engineMutex is the mutex of the engine's core (Coordinator.mu, the
// watch hub's and the etcd reader's). Built with -tags lockcount it counts how often it is
// taken (mutex_count.go), for the test that keeps those counts down.
type engineMutex = sync.Mutex
