package dapr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	runtimev1pb "github.com/dapr/dapr/pkg/proto/runtime/v1"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/version"
)

// API is Dapr's lock API on a coordinator, whatever the protocol: the HTTP
// handler and the gRPC service decode a request into Dapr's proto message
// and call it, as daprd's own "universal" API does.
type API struct {
	cfg    Config
	locks  *coordinator.Coordinator
	log    *slog.Logger
	stores map[string]Store
}

// New returns the API for locks, configured by cfg.
func New(cfg Config, locks *coordinator.Coordinator, log *slog.Logger) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, locks: locks, log: log, stores: map[string]Store{}}
	for _, s := range cfg.Stores {
		a.stores[s.Name] = s
	}
	return a, nil
}

// request is what TryLock and Unlock requests share.
type request interface {
	GetStoreName() string
	GetResourceId() string
	GetLockOwner() string
}

// key validates req as daprd does, in its order (the ids, then the store),
// and returns the Baton key of its lock.
func (a *API) key(req request, op string) (keyspace.Key, error) {
	store := req.GetStoreName()
	switch {
	case req.GetResourceId() == "":
		return keyspace.Key{}, malformed("ResourceId is empty in lock store %s", store)
	case req.GetLockOwner() == "":
		return keyspace.Key{}, malformed("LockOwner is empty in lock store %s", store)
	}
	s, ok := a.stores[store]
	if !ok {
		return keyspace.Key{}, storeNotFound(store, a.cfg.Stores)
	}
	if err := coordinator.CheckOwner(req.GetLockOwner()); err != nil {
		return keyspace.Key{}, failed(op, err)
	}
	k, err := s.Key(a.cfg.AppID, req.GetResourceId())
	if err != nil {
		return keyspace.Key{}, malformed("ResourceId %.80q in lock store %s: %v", req.GetResourceId(), store, err)
	}
	return k, nil
}

// TryLock takes the lock of req.ResourceId for req.LockOwner for
// req.ExpiryInSeconds if nobody holds it. A held lock is Success false,
// also when its holder is the same owner: a try is never re-entrant, as
// with daprd's stores.
func (a *API) TryLock(ctx context.Context, req *runtimev1pb.TryLockRequest) (*runtimev1pb.TryLockResponse, error) {
	ok, _, err := a.tryLock(ctx, req)
	if err != nil {
		return nil, err
	}
	return &runtimev1pb.TryLockResponse{Success: ok}, nil
}

// tryLock is TryLock, and the key it took.
func (a *API) tryLock(ctx context.Context, req *runtimev1pb.TryLockRequest) (bool, keyspace.Key, error) {
	if req.GetExpiryInSeconds() <= 0 {
		return false, keyspace.Key{}, malformed("ExpiryInSeconds is not positive in lock store %s", req.GetStoreName())
	}
	k, err := a.key(req, CodeTryLock)
	if err != nil {
		return false, k, err
	}
	g, err := a.locks.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: req.GetLockOwner(), TTL: time.Duration(req.GetExpiryInSeconds()) * time.Second})
	var (
		held     *coordinator.HeldError
		delayed  *coordinator.DelayedError
		mismatch *coordinator.MismatchError
	)
	switch {
	case errors.As(err, &held), errors.As(err, &delayed), errors.As(err, &mismatch):
		// Held, held back by a lost holder's lock delay, or held through
		// Baton's API as a semaphore or a read/write lock: not granted.
		return false, k, nil
	case err != nil:
		return false, k, failed(CodeTryLock, err)
	case g.Repeated:
		return false, k, nil
	case ctx.Err() != nil:
		// The caller hung up before the grant could reach it: nobody
		// would unlock it before its expiry.
		a.release(k, g.Owner, "the caller hung up before the grant reached it")
		return false, k, failed(CodeTryLock, fmt.Errorf("%w: the caller went away", ctx.Err()))
	}
	return true, k, nil
}

// Unlock releases req.LockOwner's lock of req.ResourceId: status SUCCESS,
// LOCK_DOES_NOT_EXIST when nobody holds it (or the owner's lock ended
// without its release: its expiry passed, its sidecar's session ended, an
// operator forced it free), LOCK_BELONGS_TO_OTHERS when someone else
// holds it.
func (a *API) Unlock(ctx context.Context, req *runtimev1pb.UnlockRequest) (*runtimev1pb.UnlockResponse, error) {
	k, err := a.key(req, CodeUnlock)
	if err != nil {
		return nil, err
	}
	_, err = a.locks.Release(ctx, k, req.GetLockOwner())
	switch {
	case err == nil:
		return &runtimev1pb.UnlockResponse{Status: runtimev1pb.UnlockResponse_SUCCESS}, nil
	case errors.Is(err, coordinator.ErrNotHeld), errors.Is(err, coordinator.ErrLost):
		return &runtimev1pb.UnlockResponse{Status: runtimev1pb.UnlockResponse_LOCK_DOES_NOT_EXIST}, nil
	case errors.Is(err, coordinator.ErrNotOwner):
		return &runtimev1pb.UnlockResponse{Status: runtimev1pb.UnlockResponse_LOCK_BELONGS_TO_OTHERS}, nil
	}
	return &runtimev1pb.UnlockResponse{Status: runtimev1pb.UnlockResponse_INTERNAL_ERROR}, failed(CodeUnlock, err)
}

// release gives back a lock whose grant its caller never learned of.
func (a *API) release(k keyspace.Key, owner, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.locks.Release(ctx, k, owner); err != nil {
		a.log.Warn("could not release a Dapr lock whose caller went away: it ends at its expiry", "lock", k.String(), "owner", owner, "why", why, "err", err)
	}
}

// Ready reports whether locks can be granted: nil, or why not.
func (a *API) Ready() error { return a.locks.Ready() }

// Metadata is the answer to Dapr's metadata call: the app id, the lock
// stores as components of type lock.baton, and what serves them.
func (a *API) Metadata() *runtimev1pb.GetMetadataResponse {
	v := version.Get().Version
	m := &runtimev1pb.GetMetadataResponse{
		Id:               a.cfg.AppID,
		RuntimeVersion:   "baton-" + v,
		ExtendedMetadata: map[string]string{"daprRuntimeVersion": "baton-" + v, "baton.scope": a.locks.Layout().Scope()},
	}
	for _, s := range a.cfg.Stores {
		m.RegisteredComponents = append(m.RegisteredComponents, &runtimev1pb.RegisteredComponents{Name: s.Name, Type: "lock.baton", Version: "v1"})
	}
	return m
}
