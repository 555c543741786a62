package lease

import (
	"math"
	"time"

	"github.com/baton-dev/baton/internal/config"
)

// MinTTL is the shortest lease etcd handles reliably: the server checks
// expiry every 500 ms and a leader change adds an election timeout.
const MinTTL = 2 * time.Second

// Config configures the session keeper.
type Config struct {
	// TTL of the lease: how long after a crash the sidecar's locks stay held.
	// Rounded up to whole seconds. Default 10s, at least MinTTL.
	TTL time.Duration
	// GrantTimeout bounds one attempt to grant a lease. Default 3s; less
	// than TTL.
	GrantTimeout time.Duration
	// RetryMin and RetryMax bound the back-off between failed grants.
	// Defaults 200ms and 5s.
	RetryMin, RetryMax time.Duration
	// LossMargin is how long before etcd could expire the lease, counting
	// from the last renewal heard, the session is given up. 0 means TTL/4;
	// less than TTL/2.
	LossMargin time.Duration
	// KeysPerLease is how many keys a session puts on one lease, on
	// average, before it adds a lease. Default 2048 (deleting that many
	// keys takes etcd about 25 ms); the session keeps at most MaxLeases.
	KeysPerLease int
	// MaxLeases caps the leases of one session. Default 256.
	MaxLeases int
}

// renewEvery is how often a session asks etcd to renew each of its leases
// (see renewer).
func (c Config) renewEvery() time.Duration { return c.TTL / 6 }

func (c Config) lossMargin() time.Duration {
	if c.LossMargin == 0 {
		return c.TTL / 4
	}
	return c.LossMargin
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		TTL: 10 * time.Second, GrantTimeout: 3 * time.Second,
		RetryMin: 200 * time.Millisecond, RetryMax: time.Second,
		KeysPerLease: 2048, MaxLeases: 256,
	}
}

// Validate checks the fields and their relations.
func (c Config) Validate() error {
	switch {
	case c.TTL < MinTTL:
		return config.Invalid("lease.TTL", "lease TTL %v: must be at least %v", c.TTL, MinTTL)
	case c.GrantTimeout <= 0 || c.GrantTimeout >= c.TTL:
		return config.Invalid("lease.GrantTimeout", "grant timeout %v: must be positive and less than the lease TTL %v", c.GrantTimeout, c.TTL)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return config.Invalid("lease.RetryMin", "retry back-off %v..%v: need 0 < min <= max", c.RetryMin, c.RetryMax)
	case c.LossMargin < 0 || c.LossMargin >= c.TTL/2:
		return config.Invalid("lease.LossMargin", "loss margin %v: must be at least 0 and less than half the lease TTL %v", c.LossMargin, c.TTL)
	case c.KeysPerLease < 1:
		return config.Invalid("lease.KeysPerLease", "keys per lease %d: must be at least 1", c.KeysPerLease)
	case c.MaxLeases < 1:
		return config.Invalid("lease.MaxLeases", "max leases %d: must be at least 1", c.MaxLeases)
	}
	return nil
}

// TTLSeconds converts a TTL to etcd's whole seconds, rounding up.
func TTLSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }
