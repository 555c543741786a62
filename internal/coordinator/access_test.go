package coordinator

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// TestAccessDeniedIsNotReady: when the store refuses the scope (an etcd
// user whose role lacks its keys), the sidecar turns not ready, saying so,
// and ready again once the keys are granted, without a restart. The
// refusals of etcd itself are tested on a real etcd with authentication
// (etcdstore and cmd/sidecar).
func TestAccessDeniedIsNotReady(t *testing.T) {
	if onEtcd {
		t.Skip("the memory store's refusals; etcd's are tested in etcdstore and cmd/sidecar")
	}
	parallel(t)
	w := newWorld(t)
	a := newSidecarOn(t, w, "pod-a")
	layout, err := keyspace.NewLayout(a.c.cfg.Scope)
	if err != nil {
		t.Fatal(err)
	}
	w.mem.Deny(layout.Base(), true)
	waitFor(t, 10*time.Second, "not ready while denied", func() bool {
		err := a.c.Ready()
		return errors.Is(err, ErrPermissionDenied) && errors.Is(err, ErrUnavailable)
	})
	w.mem.Deny(layout.Base(), false)
	waitFor(t, 10*time.Second, "ready once granted", func() bool { return a.c.Ready() == nil })
}
