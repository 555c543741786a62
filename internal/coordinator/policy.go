package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/policy"
)

// ErrForbidden is a call the lock policy refuses; it comes as a
// *policy.Forbidden naming the rules in force.
var ErrForbidden = policy.ErrForbidden

// Policy decides which calls of this sidecar's callers are allowed: who
// may take which keys and force release which locks (package policy's
// Guard). Reading locks, and releasing or extending one's own, are always
// allowed: a policy governs taking a lock, never letting it go.
type Policy interface {
	// Check returns nil, an error wrapping ErrForbidden, or one wrapping
	// policy.ErrNoPolicy when no policy is known.
	Check(a policy.Action, key string) error
	// Ready returns an error wrapping policy.ErrNoPolicy while no policy
	// is known.
	Ready() error
}

// WithPolicy makes the coordinator check every acquire and force release
// with p. Without it, everything is allowed.
func WithPolicy(p Policy) Option { return func(c *Coordinator) { c.guard.Policy = p } }

// allowAll is the policy of a coordinator given none.
type allowAll struct{}

func (allowAll) Check(policy.Action, string) error { return nil }
func (allowAll) Ready() error                      { return nil }

// stillAllowed checks, for a waiter about to be granted (p), the policy in
// force now: a grant is a use of the lock, and the policy may have
// changed while it waited. While the policy cannot be known, the waiter
// keeps its place and waits for it (until its wait, ctx, runs out). A
// refused waiter's key is deleted, and it is told why.
func (e *entry) stillAllowed(ctx context.Context, req AcquireRequest, p place) error {
	c := e.co
	err := c.guard.within(ctx, req)
	if err == nil {
		return nil
	}
	e.retire(p.key, p.rev, p.sess)
	if errors.Is(err, ErrForbidden) {
		c.log.Warn("waiter refused at its grant: the lock policy changed while it waited", "lock", req.Key.String(), "owner", req.Owner, "err", err)
		return fmt.Errorf("acquire %q: refused when its turn came, by the lock policy in force then: %w", req.Key, err)
	}
	return fmt.Errorf("acquire %q: %w", req.Key, err)
}

// policyGuard checks the lock policy, failing closed: a policy not known
// refuses what it would have judged.
type policyGuard struct {
	Policy
	connected func() error    // why etcd cannot be asked, when it cannot (Coordinator.connected)
	stop      <-chan struct{} // closed by Shutdown: ends every wait
	clock     clockwork.Clock
}

// allowed checks a with k against the policy: a refusal as is (403), no
// policy known as unavailable (503: the sidecar fails closed), saying
// first why etcd cannot be asked when it cannot, which is why the policy
// is not known.
func (g *policyGuard) allowed(a policy.Action, k keyspace.Key) error {
	err := g.Check(a, k.String())
	if !errors.Is(err, policy.ErrNoPolicy) {
		return err
	}
	if cerr := g.connected(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// within is allowed for req, which a wait rides out: while the policy
// cannot be known for want of etcd (the sidecar fails closed), a caller
// that asked to wait waits for it to be known again, until its wait (ctx)
// runs out, and is then answered unavailable.
func (g *policyGuard) within(ctx context.Context, req AcquireRequest) error {
	err := g.allowed(policy.Lock, req.Key)
	if req.Wait == 0 || !errors.Is(err, ErrUnavailable) {
		return err
	}
	retry := retryBackoff(time.Second)
	for {
		select {
		case <-ctx.Done():
			return err
		case <-g.stop:
			return err
		case <-g.clock.After(retry.NextBackOff()):
		}
		if err = g.allowed(policy.Lock, req.Key); !errors.Is(err, ErrUnavailable) {
			return err
		}
	}
}
