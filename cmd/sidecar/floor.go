package main

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
)

// The sidecar's side of fences after an etcd restore (etcdstore.History):
// what it does when etcd is found to have gone back in time, and how it
// learns the floor other sidecars of its scope found.

// rewound is told that etcd went back in time (see etcdstore.History): the
// locks whose keys went with it are lost, and the floor is written to the
// scope's floor key, so that every sidecar of the scope, and any that
// starts later, refuses the fences at or below it. It runs on the answer's
// path of an etcd call: the work is done aside.
func (sc *sidecar) rewound(err error) {
	if !sc.built.Load() {
		sc.log.Error("etcd went back in time", "err", err)
		return
	}
	coord, store := sc.coord, sc.store
	go coord.Rewound(err)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*sc.o.coord.RequestTimeout)
		defer cancel()
		if werr := store.RaiseFloor(ctx, coord.Layout().Floor(), sc.history.Floor()); werr != nil {
			sc.log.Error("cannot write the scope's fence floor", "floor", sc.history.Floor(), "err", werr)
		}
	}()
}

// followFloor keeps the history's floor at least at the scope's floor key,
// which a sidecar that found etcd gone back in time writes, until ctx ends.
func (sc *sidecar) followFloor(ctx context.Context) error {
	key := sc.coord.Layout().Floor()
	sc.store.Follow(ctx, key, time.Second, etcdstore.Follower{
		Set: func(v []byte, rev int64) {
			f, err := etcdstore.ParseFloor(v)
			if err != nil {
				sc.log.Warn("ignoring the scope's fence floor", "key", key, "err", err)
				return
			}
			sc.history.Raise(f, fmt.Sprintf("the scope's fence floor %s (etcd revision %d)", key, rev))
		},
		Fail: func(err error) { sc.log.Warn("cannot read the scope's fence floor", "key", key, "err", err) },
	})
	return nil
}
