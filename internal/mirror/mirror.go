// Package mirror copies Baton's locks from etcd into Lock objects, so that
// `kubectl get locks -A` shows who runs what, and carries out force
// releases asked for by annotation. etcd stays the single source of truth:
// the objects are a projection, rebuilt from a full read of etcd on start
// and after any gap in the watch.
package mirror

import (
	"fmt"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
)

// Mirror keeps Lock objects in step with etcd. It runs inside a
// controller-runtime manager, on the elected leader only.
type Mirror struct {
	cfg      Config
	etcd     *clientv3.Client
	client   client.Client
	live     client.Reader // the API server itself, past the cache
	recorder recorder.EventRecorder
	log      logr.Logger
	view     *view
	events   chan event.GenericEvent // the Locks to look at
	leases   chan event.GenericEvent // the elections' Leases to look at
	forced   func()                  // hears each force release (OnForceRelease)
}

// Option configures a Mirror.
type Option func(*Mirror)

// OnForceRelease makes f hear each force release the mirror carries out,
// for a metric.
func OnForceRelease(f func()) Option { return func(m *Mirror) { m.forced = f } }

// Setup adds the mirror to mgr: the etcd follower (a leader-elected
// runnable) and the Lock controller. mgr's scheme must know the Lock type.
func Setup(mgr manager.Manager, cfg Config, etcd *clientv3.Client, opts ...Option) (*Mirror, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Mirror{
		cfg: cfg, etcd: etcd, client: mgr.GetClient(), live: mgr.GetAPIReader(),
		recorder: mgr.GetEventRecorder("baton-mirror"),
		log:      mgr.GetLogger().WithName("mirror"),
		view:     newView(),
		events:   make(chan event.GenericEvent, 1024),
		leases:   make(chan event.GenericEvent, 1024),
		forced:   func() {},
	}
	for _, o := range opts {
		o(m)
	}
	if err := mgr.Add(manager.RunnableFunc(m.follow)); err != nil {
		return nil, fmt.Errorf("add the etcd follower: %w", err)
	}
	err := builder.ControllerManagedBy(mgr).
		Named("lock-mirror").
		For(&batonv1.Lock{}).
		// One mirror per manager in production; the tests start several
		// managers in one process, one after the other.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(source.Channel(m.events, &handler.EnqueueRequestForObject{})).
		Complete(m)
	if err != nil {
		return nil, fmt.Errorf("set up the Lock controller: %w", err)
	}
	// No For: the Leases are read past the cache, which would otherwise
	// hold every Lease of the cluster (the nodes' among them).
	err = builder.ControllerManagedBy(mgr).
		Named("election-mirror").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(source.Channel(m.leases, &handler.EnqueueRequestForObject{})).
		Complete(electionMirror{m})
	if err != nil {
		return nil, fmt.Errorf("set up the election controller: %w", err)
	}
	return m, nil
}
