// Package engine wires one sidecar's lock engine, as `baton serve` runs
// it and as the tests run it: the etcd client (every call timed for the
// metrics and its revision read for the fences' floor), the session's
// lease keeper (resuming a crashed predecessor's leases from the state
// file), the store, the lock policy, the coordinator, and the order in
// which they start and stop. Front ends (the socket API, Dapr's API) are
// put in front of Engine.Coordinator by whoever runs the engine, which
// tells them when to drain; nothing else re-wires the engine.
//
// The order is controller-runtime's manager's idea, kept explicit: Run
// starts the session's keeper, the followers of the policy and of the
// fences' floor, and the coordinator; waits until the coordinator can
// grant; takes over the locks of the process before (the state file);
// then journals the held locks. When its context ends it stops granting,
// lets the front ends' hold streams drain, releases every lock by revoking
// the session's leases, and writes the state file last.
package engine

import (
	"time"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/policy"
)

// Config is what an engine is made of, beside its etcd client.
type Config struct {
	// Lease configures the session's leases (lease.Default()).
	Lease lease.Config
	// Coordinator configures the lock engine (coordinator.Default()).
	Coordinator coordinator.Config
	// StatePath is the state file through which a restarted sidecar keeps
	// the locks of the process before it; "" keeps none. Default "".
	StatePath string
	// PolicyFile is a lock-policy file (YAML or JSON) followed instead of
	// the scope's policy in etcd; "" follows etcd's. Default "".
	PolicyFile string
	// ServiceAccount is the pod's ServiceAccount, which lock policies
	// name. Default "".
	ServiceAccount string
	// MetricsKeyDepth labels the per-lock metrics with the first N
	// segments of the key; 0 adds no key label. Default 0.
	MetricsKeyDepth int
	// EtcdUser is the etcd user the client authenticates as, named when
	// etcd denies it something; "" for none. Default "".
	EtcdUser string
	// ShutdownGrace bounds how long the engine waits, on its way down, for
	// the front ends' hold streams to drain before it lets every lock go.
	// Default 10s.
	ShutdownGrace time.Duration
}

// Default returns the defaults documented on Config.
func Default() Config {
	return Config{
		Lease:         lease.Default(),
		Coordinator:   coordinator.Default(),
		ShutdownGrace: 10 * time.Second,
	}
}

// Validate checks the configuration, its parts' included; each error is a
// *config.FieldError naming its field.
func (c Config) Validate() error {
	if err := c.Lease.Validate(); err != nil {
		return err
	}
	if err := c.Coordinator.Validate(); err != nil {
		return err
	}
	if c.Coordinator.RequestTimeout >= c.Lease.TTL/2 {
		return config.Invalid("coordinator.RequestTimeout", "request timeout %v: must be less than half the lease TTL (%v)", c.Coordinator.RequestTimeout, c.Lease.TTL)
	}
	if c.MetricsKeyDepth < 0 || c.MetricsKeyDepth > keyspace.MaxSegments {
		return config.Invalid("engine.MetricsKeyDepth", "metrics key depth %d: must be 0 to %d", c.MetricsKeyDepth, keyspace.MaxSegments)
	}
	if c.ServiceAccount != "" {
		if err := policy.CheckServiceAccount(c.ServiceAccount); err != nil {
			return config.Invalid("engine.ServiceAccount", "%w", err)
		}
	}
	if c.PolicyFile != "" {
		if _, err := policy.ReadFile(c.PolicyFile); err != nil {
			return config.Invalid("engine.PolicyFile", "%w", err)
		}
	}
	if c.ShutdownGrace < 0 || c.ShutdownGrace > 10*time.Minute {
		return config.Invalid("engine.ShutdownGrace", "shutdown grace %v: must be 0 to 10m", c.ShutdownGrace)
	}
	return nil
}
