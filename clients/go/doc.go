// Package baton is the Go client of the Baton sidecar's socket API: the
// client that baton run and baton locks use, for apps to import.
//
//	go get github.com/baton-dev/baton/clients/go
//
// The module has no dependency: it speaks HTTP and JSON over the sidecar's
// unix socket, as curl does, with the bodies of package lockapi (the API's
// contract, which the sidecar itself is built with).
//
// Client.Lock holds a lock through a hold stream and gives the context the
// work runs under: it is done as soon as the lock ends or may have ended
// (lost, its sidecar gone or silent past the lock's validity), so that the
// work never outlives its lock, and says why (a *LostError). WithLock wraps
// that around a function. Pass Lock.Fence to whatever the work writes, so
// that it refuses a paused holder's late write (docs/fencing.md).
//
// Client.Lead campaigns in an election and gives a Lock of the
// leadership, whose context ends when it may have ended; Leader, Observe,
// Proclaim and Resign are the rest of an election's API.
//
// SocketPath finds the socket as the baton command does.
package baton
