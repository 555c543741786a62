package main

import (
	"github.com/spf13/pflag"

	"github.com/baton-dev/baton/internal/etcdmaint"
)

// maintFlags are the flags of Baton's etcd maintenance (package
// etcdmaint): serve's for its embedded etcd, mirror's for the chart's.
var maintFlags = []string{"etcd-maintenance-interval", "etcd-defrag-free-ratio", "etcd-defrag-min-size", "etcd-defrag-quota-ratio"}

// addMaintFlags adds the maintenance's flags, setting c; whose says which
// etcd they keep.
func addMaintFlags(fs *pflag.FlagSet, c *etcdmaint.Config, whose string) {
	fs.DurationVar(&c.Interval, "etcd-maintenance-interval", c.Interval, "how often "+whose+" members are looked at, and defragmented by the rules of the flags below, or made room in when etcd is out of space (its history compacted, then defragmented, then its NOSPACE alarm disarmed); see docs/operations.md, \"etcd's space\"")
	fs.Float64Var(&c.FreeRatio, "etcd-defrag-free-ratio", c.FreeRatio, "defragment a member when this share of its database file is free (compacted away, not given back) and the file is at least --etcd-defrag-min-size")
	fs.Int64Var(&c.MinSize, "etcd-defrag-min-size", c.MinSize, "the smallest database file, in bytes, defragmented for its free share alone")
	fs.Float64Var(&c.QuotaRatio, "etcd-defrag-quota-ratio", c.QuotaRatio, "defragment a member whose database file has reached this share of etcd's space quota, when a tenth of it is free")
}

// maintChanged names the first maintenance flag set, or "".
func maintChanged(fs *pflag.FlagSet) string {
	for _, name := range maintFlags {
		if fs.Changed(name) {
			return name
		}
	}
	return ""
}
