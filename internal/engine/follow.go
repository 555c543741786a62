package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/policy"
)

// followPolicy keeps the guard's policy current until ctx ends: from the
// policy file when one was given, else from etcd.
func (e *Engine) followPolicy(ctx context.Context) error {
	if e.cfg.PolicyFile != "" {
		policy.FollowFile(ctx, e.cfg.PolicyFile, e.guard, time.Second)
		return nil
	}
	e.store.Follow(ctx, e.policyKey(), time.Second, etcdstore.Follower{
		Set:  func(v []byte, rev int64) { e.guard.SetJSON(v, fmt.Sprintf("etcd revision %d", rev)) },
		Fail: e.guard.Fail,
	})
	return nil
}

// The engine's side of fences after an etcd restore (etcdstore.History):
// what it does when etcd is found to have gone back in time, and how it
// learns the floor other sidecars of its scope found.

// rewound is told that etcd went back in time (see etcdstore.History): the
// locks whose keys went with it are lost, and the floor is written to the
// scope's floor key, so that every sidecar of the scope, and any that
// starts later, refuses the fences at or below it. It runs on the answer's
// path of an etcd call: the work is done aside.
func (e *Engine) rewound(err error) {
	if !e.built.Load() {
		e.log.Error("etcd went back in time", "err", err)
		return
	}
	coord, store := e.coord, e.store
	go coord.Rewound(err)
	go e.elect.Rewound(err)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*e.cfg.Coordinator.RequestTimeout)
		defer cancel()
		if werr := store.RaiseFloor(ctx, coord.Layout().Floor(), e.history.Floor()); werr != nil {
			e.log.Error("cannot write the scope's fence floor", "floor", e.history.Floor(), "err", werr)
		}
	}()
}

// followFloor keeps the history's floor at least at the scope's floor key,
// which a sidecar that found etcd gone back in time writes, until ctx ends.
func (e *Engine) followFloor(ctx context.Context) error {
	key := e.coord.Layout().Floor()
	e.store.Follow(ctx, key, time.Second, etcdstore.Follower{
		Set: func(v []byte, rev int64) {
			f, err := etcdstore.ParseFloor(v)
			if err != nil {
				e.log.Warn("ignoring the scope's fence floor", "key", key, "err", err)
				return
			}
			e.history.Raise(f, fmt.Sprintf("the scope's fence floor %s (etcd revision %d)", key, rev))
		},
		Fail: func(err error) { e.log.Warn("cannot read the scope's fence floor", "key", key, "err", err) },
	})
	return nil
}
