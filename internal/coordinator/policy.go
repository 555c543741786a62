package coordinator

import (
	"errors"
	"fmt"

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
func WithPolicy(p Policy) Option { return func(c *Coordinator) { c.policy = p } }

// allowAll is the policy of a coordinator given none.
type allowAll struct{}

func (allowAll) Check(policy.Action, string) error { return nil }
func (allowAll) Ready() error                      { return nil }

// allowed checks a with k against the policy: a refusal as is (403), no
// policy known as unavailable (503: the sidecar fails closed), saying
// first why etcd cannot be asked when it cannot, which is why the policy
// is not known.
func (c *Coordinator) allowed(a policy.Action, k keyspace.Key) error {
	err := c.policy.Check(a, k.String())
	if !errors.Is(err, policy.ErrNoPolicy) {
		return err
	}
	if cerr := c.connected(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
