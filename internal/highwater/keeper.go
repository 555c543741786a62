package highwater

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/baton-dev/baton/internal/keyspace"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Keeper reads etcd's revision every Interval, keeps the highest in the
// ConfigMap, and writes every scope's fence floor when etcd is found
// below it. It runs on the elected leader.
type Keeper struct {
	cfg  Config
	etcd *clientv3.Client
	kube client.Client // writes the ConfigMap
	read client.Reader // reads it, and lists namespaces, past the cache
	log  logr.Logger
	now  func() time.Time

	rec     record    // the ConfigMap as last read or written
	mark    int64     // the highest revision seen, or read from the ConfigMap
	rate    float64   // the fastest etcd's revision was seen to grow, per second
	seen    []string  // the scopes seen in etcd, sorted
	cluster uint64    // etcd's cluster id, as last seen
	last    probe     // the last answer, for the rate
	savedAt time.Time // when the ConfigMap was written last
	scanned time.Time // when etcd's scopes were listed last
	below   bool      // etcd is below the mark
	floored time.Time // when the floors were written last, while below
}

// probe is etcd's revision at a time.
type probe struct {
	rev int64
	at  time.Time
}

const (
	// refloor is how often, while etcd stays below the mark, the floors
	// are written again: scopes (namespaces) may have come meanwhile.
	refloor = 30 * time.Second
	// rescan is how often etcd's scopes are listed while it goes forward.
	rescan = time.Minute
	// minMargin is the least margin above the mark a floor is written at.
	minMargin = 1000
)

// Setup adds a Keeper to mgr, on the etcd of cli.
func Setup(mgr manager.Manager, cli *clientv3.Client, cfg Config) (*Keeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k := &Keeper{cfg: cfg, etcd: cli, kube: mgr.GetClient(), read: mgr.GetAPIReader(), log: mgr.GetLogger().WithName("highwater"), now: time.Now}
	return k, mgr.Add(k)
}

// NeedLeaderElection reports true: only the leader reads etcd and writes
// the ConfigMap.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start keeps the mark until ctx ends, and then saves it.
func (k *Keeper) Start(ctx context.Context) error {
	for wait := k.cfg.Interval; ; wait = min(2*wait, time.Minute) {
		err := k.load(ctx)
		if err == nil {
			break
		}
		k.log.Error(err, "cannot read the fences' high-water mark; etcd's revision is not checked meanwhile", "configmap", k.cfg.Namespace+"/"+k.cfg.Name, "retry", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	k.log.Info("keeping the fences' high-water mark", "configmap", k.cfg.Namespace+"/"+k.cfg.Name, "revision", k.mark)
	tick := time.NewTicker(k.cfg.Interval)
	defer tick.Stop()
	for {
		k.step(ctx)
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), k.cfg.RequestTimeout)
			defer cancel()
			if err := k.save(sctx); err != nil {
				k.log.Error(err, "cannot save the fences' high-water mark", "revision", k.mark)
			}
			return nil
		case <-tick.C:
		}
	}
}

// step reads etcd's revision once, and acts on it.
func (k *Keeper) step(ctx context.Context) {
	gctx, cancel := context.WithTimeout(ctx, k.cfg.RequestTimeout)
	// A linearizable read of a key that is never written: its answer's
	// header carries etcd's revision now, and its cluster id.
	resp, err := k.etcd.Get(gctx, keyspace.Root+"high-water-probe")
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			k.log.V(1).Info("cannot read etcd's revision", "err", err.Error())
		}
		return
	}
	rev, id, now := resp.Header.Revision, resp.Header.ClusterId, k.now()
	if rev < k.mark {
		k.last = probe{}
		k.rewound(ctx, rev, id)
		return
	}
	if k.below {
		k.log.Info("etcd's revision is past the fences' floor again: sidecars grant again", "revision", rev, "mark", k.mark)
		k.below = false
	}
	if k.cluster != 0 && id != 0 && id != k.cluster {
		k.log.Info("etcd's cluster id changed, its revision past every fence granted: fences still grow", "from", fmt.Sprintf("%x", k.cluster), "to", fmt.Sprintf("%x", id), "revision", rev)
	}
	if d := now.Sub(k.last.at).Seconds(); k.last.rev > 0 && d > 0 {
		k.rate = max(k.rate, float64(rev-k.last.rev)/d)
	}
	k.last = probe{rev, now}
	k.mark, k.cluster = rev, id
	if now.Sub(k.scanned) >= rescan {
		if found, err := k.etcdScopes(ctx); err == nil {
			k.seen, k.scanned = merge(k.seen, found), now
		}
	}
	if k.rec.behind(k) && now.Sub(k.savedAt) >= k.cfg.SaveEvery {
		if err := k.save(ctx); err != nil && ctx.Err() == nil {
			k.log.Error(err, "cannot save the fences' high-water mark", "revision", k.mark)
		}
	}
}

// floor is the fence floor to write: the mark, and a margin for the
// revisions etcd may have reached since the mark was read or saved: twice
// what it reaches at the fastest rate seen in that time, and at least
// minMargin. A bump is cheap; a fence granted twice is not.
func (k *Keeper) floor() int64 {
	lag := (k.cfg.Interval + k.cfg.SaveEvery + k.cfg.RequestTimeout).Seconds()
	return k.mark + max(minMargin, int64(2*k.rate*lag))
}

// rewound acts on etcd found at revision rev, below the mark: it writes
// the floor into every scope's floor key, at once and then every refloor
// while etcd stays below. The mark never goes down.
func (k *Keeper) rewound(ctx context.Context, rev int64, id uint64) {
	floor := k.floor()
	if !k.below {
		k.log.Error(errors.New("etcd went back in time"), "etcd's revision is below the fences granted: it was restored from an older snapshot or lost its data; no lock is granted until its revision passes the floor. Restore it with a revision bump (etcdutl snapshot restore SNAPSHOT --bump-revision N --mark-compacted)",
			"revision", rev, "mark", k.mark, "floor", floor, "bump", floor-rev+minMargin, "cluster", fmt.Sprintf("%x", id), "was", fmt.Sprintf("%x", k.cluster))
		k.below = true
		k.floored = time.Time{}
	}
	if !k.floored.IsZero() && k.now().Sub(k.floored) < refloor {
		return
	}
	n, err := k.writeFloors(ctx, floor)
	if err != nil {
		k.log.Error(err, "cannot write every scope's fence floor; trying again", "floor", floor, "written", n)
		return
	}
	k.floored = k.now()
	k.log.Info("wrote the fence floor of every scope", "floor", floor, "scopes", n)
}

// merge returns the sorted union of a and b.
func merge(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
