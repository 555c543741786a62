package main

import (
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/config"
)

// flagOf names the flag that sets a Config field (config.FieldError's
// Field), or "" for a field no flag sets. A field derived from another
// flag names that flag: the lease's grant timeout and loss margin follow
// --lease-ttl.
func flagOf(field string) string {
	switch field {
	case "lease.TTL", "lease.GrantTimeout", "lease.LossMargin":
		return "--lease-ttl"
	case "lease.KeysPerLease":
		return "--keys-per-lease"
	case "engine.MetricsKeyDepth":
		return "--metrics-key-depth"
	case "engine.ServiceAccount":
		return "--service-account"
	case "engine.PolicyFile":
		return "--policy-file"
	case "engine.ShutdownGrace":
		return "--shutdown-grace"
	case "coordinator.Scope":
		return "--scope"
	case "coordinator.Identity.Cluster":
		return "--cluster-name"
	case "coordinator.DefaultTTL":
		return "--default-ttl"
	case "coordinator.MaxHold":
		return "--max-hold"
	case "coordinator.MaxWait":
		return "--max-wait"
	case "coordinator.MaxWaiters":
		return "--max-waiters"
	case "coordinator.RequestTimeout":
		return "--request-timeout"
	case "coordinator.WatchDelay":
		return "--watch-delay"
	case "coordinator.OnceRetention":
		return "--once-retention"
	case "coordinator.LockDelay":
		return "--lock-delay"
	case "coordinator.MaxLockDelay":
		return "--max-lock-delay"
	case "coordinator.WatchLinger":
		return "--watch-linger"
	case "coordinator.MaxLockWatches":
		return "--max-lock-watches"
	case "embedetcd.DataDir":
		return "--data-dir"
	case "embedetcd.ClientURL":
		return "--embedded-client-url"
	case "embedetcd.History":
		return "--embedded-history"
	case "embedetcd.Quota":
		return "--embedded-quota"
	}
	return controllerFlag(field)
}

// controllerFlag is flagOf for the fields of the controller's and the
// etcd keepers' packages.
func controllerFlag(field string) string {
	switch field {
	case "etcdmaint.Interval":
		return "--etcd-maintenance-interval"
	case "etcdmaint.FreeRatio":
		return "--etcd-defrag-free-ratio"
	case "etcdmaint.MinSize":
		return "--etcd-defrag-min-size"
	case "etcdmaint.QuotaRatio":
		return "--etcd-defrag-quota-ratio"
	case "etcdbackup.Dir":
		return "--dir"
	case "etcdbackup.Every":
		return "--every"
	case "etcdbackup.Keep":
		return "--keep"
	case "etcdbackup.Snapshot":
		return "--snapshot"
	case "etcdbackup.DataDir":
		return "--data-dir"
	case "etcdbackup.Member":
		return "--name"
	case "etcdbackup.RevisionBump":
		return "--revision-bump"
	case "etcdmembers.Peers":
		return "--etcd-members"
	case "etcdmembers.Selector":
		return "--etcd-members-selector"
	case "etcdmembers.Interval":
		return "--etcd-members-interval"
	case "etcdmembers.Namespace":
		return "--leader-election-namespace"
	case "mirror.Scopes":
		return "--scopes"
	case "mirror.FreeRetention":
		return "--free-retention"
	case "mirror.Owner":
		return "--owner-cluster-role"
	case "controller.WebhookPort":
		return "--webhook-port"
	case "controller.ElectionNamespace", "highwater.Namespace":
		return "--leader-election-namespace"
	case "highwater.Name":
		return "--fences-configmap"
	case "highwater.Scopes":
		return "--scopes"
	case "access.Namespace":
		return "--etcd-secrets-namespace"
	case "access.CASecret":
		return "--etcd-ca-secret"
	case "access.ServerSecret":
		return "--etcd-server-secret"
	case "access.ServerNames":
		return "--etcd-server-names"
	case "access.ClientSecret":
		return "--etcd-client-secret"
	case "access.Validity":
		return "--etcd-cert-validity"
	case "dapr.Stores":
		return "--dapr-store"
	case "dapr.AppID":
		return "--dapr-app-id"
	}
	return ""
}

// flagError puts the flag behind err first when err is about a Config
// field that a flag sets, so that the message says what to change; any
// other error is returned as it is, with "configuration" before a field
// no flag sets.
func flagError(err error) error {
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if f := flagOf(fe.Field); f != "" {
		return fmt.Errorf("%s: %w", f, err)
	}
	return fmt.Errorf("configuration (%s): %w", fe.Field, err)
}
