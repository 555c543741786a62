package etcdbackup

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// retry is how soon a snapshot that failed is tried again.
const retry = time.Minute

// Observer hears what Run does and finds: Metrics makes it Prometheus
// series, which an alert reads to say that no backup was written for too
// long.
type Observer interface {
	// Scheduled reports how often a snapshot is taken.
	Scheduled(every time.Duration)
	// Kept reports the snapshots in the directory: the newest (nil when
	// there is none) and how many. Run reports them at its start, after
	// each snapshot, and every Config.Look, so that one taken beside it
	// (etcd-backup --once) counts too.
	Kept(newest *Backup, kept int)
	// Took reports a snapshot taken on the schedule, and how long it took.
	Took(b Backup, took time.Duration)
	// Failed reports a snapshot on the schedule that failed.
	Failed(err error)
}

// Run takes a snapshot every cfg.Every until ctx ends, logging each and
// telling obs (which may be nil): the first once the newest in the
// directory is that old, so that a restart takes none early. A snapshot
// that fails is tried again a minute later.
func Run(ctx context.Context, cli *clientv3.Client, cfg Config, log *slog.Logger, obs Observer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if obs == nil {
		obs = nopObserver{}
	}
	obs.Scheduled(cfg.Every)
	all, err := List(cfg.Dir)
	if err != nil {
		return err
	}
	next := time.Now()
	if len(all) > 0 {
		next = all[0].Taken.Add(cfg.Every)
		log.Info("etcd backups: the newest is here; the next is due then", "newest", all[0].Name, "next", next.UTC().Format(time.RFC3339), "kept", len(all))
	}
	kept(obs, all)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(time.Until(next), cfg.Look)):
		}
		if time.Now().Before(next) {
			if all, err := List(cfg.Dir); err == nil {
				kept(obs, all)
			}
			continue
		}
		start := time.Now()
		b, deleted, err := Take(ctx, cli, cfg, start)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error("etcd backup failed; trying again", "err", err, "in", retry)
			obs.Failed(err)
			next = time.Now().Add(retry)
			continue
		}
		took := time.Since(start)
		log.Info("etcd backup written", "file", b.Name, "revision", b.Revision, "size", b.Size, "took", took.Round(time.Millisecond), "deleted", deleted)
		obs.Took(b, took)
		if all, err := List(cfg.Dir); err == nil {
			kept(obs, all)
		}
		next = start.Add(cfg.Every)
	}
}

// kept tells obs the newest of all, and how many there are.
func kept(obs Observer, all []Backup) {
	if len(all) == 0 {
		obs.Kept(nil, 0)
		return
	}
	obs.Kept(&all[0], len(all))
}

// nopObserver hears nothing.
type nopObserver struct{}

func (nopObserver) Scheduled(time.Duration)    {}
func (nopObserver) Kept(*Backup, int)          {}
func (nopObserver) Took(Backup, time.Duration) {}
func (nopObserver) Failed(error)               {}
