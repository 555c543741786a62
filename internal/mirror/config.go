package mirror

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Config configures the mirror.
type Config struct {
	// Scopes limits the mirror to these scopes (each mirrored into the
	// namespace of the same name). Empty: every scope.
	Scopes []string
	// FreeRetention is how long a freed lock's object stays, showing its
	// last holder, before it is deleted. Default 10m.
	FreeRetention time.Duration
	// RequestTimeout bounds each etcd request. Default 5s.
	RequestTimeout time.Duration
	// RetryInterval is the pause before the etcd watch is opened again
	// after it failed. Default 1s.
	RetryInterval time.Duration
	// LeaderLabels labels the pod of each election's leader that asks for
	// it (AnnotationLeaderLabel), which needs the permission to get, list
	// and patch pods. Default: off.
	LeaderLabels bool
	// Cluster is this Kubernetes cluster's name when clusters share one
	// etcd (the sidecars' --cluster-name): a leader of another cluster's
	// has no pod here, whatever its pod's name. Default: not shared.
	Cluster string
	// Owner, when not nil, is made the owner of every Lock object the
	// mirror writes, so that deleting it has Kubernetes' garbage collector
	// delete them all: the chart's controller ClusterRole, which helm
	// uninstall deletes. A cluster-scoped object. Default: none.
	Owner *metav1.OwnerReference
}

// Default returns the documented defaults.
func Default() Config {
	return Config{FreeRetention: 10 * time.Minute, RequestTimeout: 5 * time.Second, RetryInterval: time.Second}
}

// Validate checks the fields.
func (c Config) Validate() error {
	for _, s := range c.Scopes {
		if err := keyspace.ValidateScope(s); err != nil {
			return config.Invalid("mirror.Scopes", "scope %q: %w", s, err)
		}
	}
	switch {
	case c.FreeRetention <= 0:
		return config.Invalid("mirror.FreeRetention", "free retention %v: must be positive", c.FreeRetention)
	case c.RequestTimeout <= 0:
		return config.Invalid("mirror.RequestTimeout", "request timeout %v: must be positive", c.RequestTimeout)
	case c.RetryInterval <= 0:
		return config.Invalid("mirror.RetryInterval", "retry interval %v: must be positive", c.RetryInterval)
	case c.Owner != nil && (c.Owner.UID == "" || c.Owner.Name == "" || c.Owner.Kind == "" || c.Owner.APIVersion == ""):
		return config.Invalid("mirror.Owner", "owner %+v: want its API version, kind, name and UID", *c.Owner)
	}
	return nil
}

// prefixes returns the etcd prefixes to watch.
func (c Config) prefixes() []string {
	if len(c.Scopes) == 0 {
		return []string{keyspace.Root}
	}
	var out []string
	for _, s := range c.Scopes {
		l, _ := keyspace.NewLayout(s) // validated
		out = append(out, l.Base(), l.In(keyspace.Elections).Base())
	}
	return out
}

// inScope reports whether the namespace ns is mirrored.
func (c Config) inScope(ns string) bool {
	if len(c.Scopes) == 0 {
		return true
	}
	for _, s := range c.Scopes {
		if s == ns {
			return true
		}
	}
	return false
}
