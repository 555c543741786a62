// Package highwater keeps, in the controller, the high-water mark of the
// fences: the highest revision Baton's etcd has reached, in a ConfigMap,
// where it outlives etcd, the sidecars and their pods. A sidecar keeps the
// revisions it saw in its state file, and finds etcd gone back in time by
// itself; but a sidecar of a pod made after a restore saw nothing, and
// nor did any sidecar when every pod was replaced. The controller saw it
// all: when etcd's revision is below the mark, it writes the mark into
// every scope's fence floor (keyspace.Layout.Floor), which every sidecar
// follows, and no fence at or below it is granted until etcd is restored
// with a revision bump (etcdutl snapshot restore --bump-revision).
package highwater

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Config configures the Keeper.
type Config struct {
	// Namespace and Name locate the ConfigMap that keeps the mark: the
	// controller's namespace, and "baton-fences" by default.
	Namespace string
	Name      string
	// Scopes are the scopes whose floors are written; empty: every
	// namespace of the cluster and every scope found in etcd.
	Scopes []string
	// Interval is how often etcd's revision is read. Default 1s.
	Interval time.Duration
	// SaveEvery is how often, at most, the ConfigMap is written while the
	// revision grows. Default 2s: the revisions of the last SaveEvery
	// before the controller and etcd both lost their memory are not kept.
	SaveEvery time.Duration
	// RequestTimeout bounds each etcd and Kubernetes request. Default 5s.
	RequestTimeout time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{Name: "baton-fences", Interval: time.Second, SaveEvery: 2 * time.Second, RequestTimeout: 5 * time.Second}
}

// Validate checks the fields.
func (c Config) Validate() error {
	for _, s := range c.Scopes {
		if err := keyspace.ValidateScope(s); err != nil {
			return config.Invalid("highwater.Scopes", "scope %q: %w", s, err)
		}
	}
	switch {
	case c.Namespace == "":
		return config.Invalid("highwater.Namespace", "the fences ConfigMap's namespace: required")
	case c.Name == "":
		return config.Invalid("highwater.Name", "the fences ConfigMap's name: required")
	case len(validation.IsDNS1123Subdomain(c.Name)) > 0:
		return config.Invalid("highwater.Name", "the fences ConfigMap's name %q: %s", c.Name, strings.Join(validation.IsDNS1123Subdomain(c.Name), "; "))
	case c.Interval <= 0:
		return config.Invalid("highwater.Interval", "interval %v: must be positive", c.Interval)
	case c.SaveEvery < 0:
		return config.Invalid("highwater.SaveEvery", "save interval %v: must not be negative", c.SaveEvery)
	case c.RequestTimeout <= 0:
		return config.Invalid("highwater.RequestTimeout", "request timeout %v: must be positive", c.RequestTimeout)
	}
	return nil
}
