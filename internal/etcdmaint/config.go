// Package etcdmaint keeps an etcd that Baton runs fit for a year without an
// operator's hands: it defragments its members by rules an operator can
// read and set, one member at a time and the leader last, and when etcd
// raises its NOSPACE alarm it makes room (compaction of the history, then
// defragmentation) and disarms it. The sidecar runs it on its embedded
// etcd; the controller's leader on the chart's etcd, as etcd's root user.
//
// Compaction itself is etcd's own, periodic (--auto-compaction-retention,
// the embedded etcd's History): it keeps the history short, and the space
// it frees inside the database file is reused for new writes. But etcd's
// space quota counts the file, and only a defragmentation gives the freed
// pages back; that is what this package adds.
package etcdmaint

import (
	"time"

	"github.com/baton-dev/baton/internal/config"
)

// Config says when a member is defragmented. A member is defragmented when
// its database file is fragmented (FreeRatio of it free, and at least
// MinSize), when the file nears its space quota (QuotaRatio of it) with a
// tenth of it free, and while etcd's NOSPACE alarm is raised when that
// brings its file well under the quota.
type Config struct {
	// Interval is how often the members are looked at. Default 1m. While
	// etcd is out of space and a pass could not disarm it, the next pass
	// comes after 10s at most.
	Interval time.Duration
	// FreeRatio is the share of a member's database file that must be free
	// (compacted away, not yet given back) for it to be defragmented, with
	// MinSize. Default 0.5, as etcd-defrag's documented rule and the etcd
	// operators' use.
	FreeRatio float64
	// MinSize is the smallest database file defragmented for its free
	// share alone: below it, a defragmentation gives back too little to
	// pause the member for. Default 100 MiB.
	MinSize int64
	// QuotaRatio is the share of its space quota at which a member's file
	// is defragmented whatever its size, when a tenth of it is free; it is
	// also the level of the BatonEtcdSpaceLow alert. Default 0.8.
	QuotaRatio float64
	// Timeout bounds each call to etcd but a defragmentation. Default 10s.
	Timeout time.Duration
	// DefragTimeout bounds a member's defragmentation: etcd copies the
	// whole file, about a second for each few hundred MiB. Default 5m.
	DefragTimeout time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		Interval:      time.Minute,
		FreeRatio:     0.5,
		MinSize:       100 << 20,
		QuotaRatio:    0.8,
		Timeout:       10 * time.Second,
		DefragTimeout: 5 * time.Minute,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return config.Invalid("etcdmaint.Interval", "interval %v: must be positive", c.Interval)
	case c.FreeRatio <= 0 || c.FreeRatio >= 1:
		return config.Invalid("etcdmaint.FreeRatio", "free ratio %v: must be above 0 and below 1", c.FreeRatio)
	case c.MinSize < 0:
		return config.Invalid("etcdmaint.MinSize", "minimum size %d: must not be negative", c.MinSize)
	case c.QuotaRatio <= 0 || c.QuotaRatio >= 1:
		return config.Invalid("etcdmaint.QuotaRatio", "quota ratio %v: must be above 0 and below 1", c.QuotaRatio)
	case c.Timeout <= 0:
		return config.Invalid("etcdmaint.Timeout", "timeout %v: must be positive", c.Timeout)
	case c.DefragTimeout <= 0:
		return config.Invalid("etcdmaint.DefragTimeout", "defragmentation timeout %v: must be positive", c.DefragTimeout)
	}
	return nil
}
