package etcdmaint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observer hears what the maintainer sees and does: package metrics makes
// it Prometheus series.
type Observer interface {
	// Saw reports the members as a pass found them.
	Saw(members []Member)
	// Defragmented reports a member's defragmentation and why; err is nil
	// when it succeeded.
	Defragmented(member string, why Reason, took time.Duration, err error)
}

// Maintainer keeps one etcd cluster: see the package's doc.
type Maintainer struct {
	cli *clientv3.Client
	cfg Config
	log *slog.Logger
	obs Observer

	// mu makes passes one at a time, and guards full.
	mu sync.Mutex
	// full holds, while etcd is out of space, the members whose last
	// defragmentation left their data filling the quota, as it left them
	// (see Config.reason).
	full map[uint64]Member
}

// New returns a maintainer of the cluster of cli, which must be allowed
// etcd's maintenance (its root user, or a cluster without authentication).
// obs may be nil.
func New(cli *clientv3.Client, cfg Config, log *slog.Logger, obs Observer) (*Maintainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if obs == nil {
		obs = nopObserver{}
	}
	return &Maintainer{cli: cli, cfg: cfg, log: log, obs: obs, full: map[uint64]Member{}}, nil
}

// Run makes a pass at once and every Config.Interval until ctx ends,
// logging what each did and failed to do. While etcd is out of space and
// a pass could not disarm it, the next comes after noSpaceRetry at most:
// no lock is granted meanwhile.
func (m *Maintainer) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		r, err := m.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			m.log.Warn("etcd maintenance: pass failed; trying again at the next", "err", err, "in", m.next(r))
		}
		t.Reset(m.next(r))
	}
}

// noSpaceRetry bounds the time between passes while etcd is out of space.
const noSpaceRetry = 10 * time.Second

// next is how long after a pass that reported r the next one comes.
func (m *Maintainer) next(r Report) time.Duration {
	if r.NoSpace && !r.Disarmed {
		return min(m.cfg.Interval, noSpaceRetry)
	}
	return m.cfg.Interval
}

// Report is what a pass did.
type Report struct {
	// Members as the pass first saw them, the leader last.
	Members []Member
	// Defragmented are the members defragmented, in order.
	Defragmented []string
	// Compacted is the revision the history was compacted to (0: none).
	Compacted int64
	// NoSpace says etcd's NOSPACE alarm was raised when the pass began;
	// Disarmed that the pass disarmed it.
	NoSpace, Disarmed bool
}

// Pass looks at every member once and does what the rules say. Members
// are defragmented one at a time, the followers first and the leader last,
// and each must answer again before the next: a defragmentation stops its
// member for as long as it copies its file. No member is defragmented
// while one does not answer (the cluster would have one fewer to serve),
// but when etcd is out of space. Then the whole history is compacted
// first (a watcher that was behind reads its keys again, as Baton's do),
// the members are looked at again, each whose file a defragmentation
// would bring well under its quota is defragmented, and the alarm is
// disarmed once every member's file is well under its quota. While the
// data in use fills the quota, every pass says so, and a member is
// defragmented again only once something was freed (see Config.reason).
func (m *Maintainer) Pass(ctx context.Context) (Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var r Report
	members, err := m.members(ctx)
	if err != nil {
		return r, err
	}
	r.Members = members
	m.obs.Saw(members)
	noSpace := false
	for _, mem := range members {
		for _, a := range mem.Alarms {
			noSpace = noSpace || a == pb.AlarmType_NOSPACE.String()
		}
	}
	r.NoSpace = noSpace
	if !noSpace {
		clear(m.full)
		for _, mem := range members {
			if mem.Err != nil {
				return r, fmt.Errorf("no member defragmented while one does not answer: %w", mem.Err)
			}
		}
	} else {
		if r.Compacted, err = m.compact(ctx); err != nil {
			return r, err
		}
		// What the compaction freed is what a defragmentation gives back.
		if members, err = m.members(ctx); err != nil {
			return r, err
		}
	}
	for _, mem := range members {
		why := m.cfg.reason(mem, noSpace, m.full[mem.ID])
		if why == "" {
			continue
		}
		after, err := m.defragment(ctx, mem, why)
		if err != nil {
			return r, err
		}
		r.Defragmented = append(r.Defragmented, mem.Name)
		if noSpace && !room(after.Size, after.Quota) {
			m.full[mem.ID] = after
		}
	}
	if noSpace {
		r.Disarmed, err = m.disarm(ctx)
	}
	return r, err
}

// compact compacts the history up to etcd's current revision, and waits
// until the space is free to be given back.
func (m *Maintainer) compact(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.DefragTimeout)
	defer cancel()
	resp, err := m.cli.Get(cctx, "\x00", clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return 0, fmt.Errorf("read etcd's revision: %w", err)
	}
	rev := resp.Header.Revision
	if _, err := m.cli.Compact(cctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, fmt.Errorf("compact etcd's history to revision %d: %w", rev, err)
	}
	m.log.Warn("etcd maintenance: etcd is out of space; its history compacted to its current revision", "revision", rev)
	return rev, nil
}

// defragment defragments mem, waits for it to answer again and returns
// it as it then is.
func (m *Maintainer) defragment(ctx context.Context, mem Member, why Reason) (Member, error) {
	dctx, cancel := context.WithTimeout(ctx, m.cfg.DefragTimeout)
	defer cancel()
	start := time.Now()
	_, err := m.cli.Defragment(dctx, mem.Endpoint)
	took := time.Since(start)
	m.obs.Defragmented(mem.Name, why, took, err)
	if err != nil {
		return mem, fmt.Errorf("defragment etcd member %s (%s): %w", mem.Name, why, err)
	}
	after := mem
	m.status(ctx, &after)
	if after.Err != nil {
		return after, fmt.Errorf("after its defragmentation: %w", after.Err)
	}
	m.log.Info("etcd maintenance: member defragmented", "member", mem.Name, "reason", string(why), "leader", mem.Leader,
		"took", took.Round(time.Millisecond), "sizeBefore", mem.Size, "sizeAfter", after.Size, "inUse", after.InUse, "quota", after.Quota)
	return after, nil
}

// disarm disarms the NOSPACE alarms once every member's file has room
// under its quota (see room); else it says the data itself is too large.
func (m *Maintainer) disarm(ctx context.Context) (bool, error) {
	members, err := m.members(ctx)
	if err != nil {
		return false, err
	}
	for _, mem := range members {
		if mem.Err != nil {
			return false, fmt.Errorf("NOSPACE alarm kept: %w", mem.Err)
		}
		switch {
		case room(mem.Size, mem.Quota):
		case room(mem.InUse, mem.Quota):
			return false, fmt.Errorf("NOSPACE alarm kept: etcd member %s's file of %d bytes is at its quota of %d with %d bytes in use: "+
				"its compaction was still freeing them when it was defragmented; the next pass defragments it again",
				mem.Name, mem.Size, mem.Quota, mem.InUse)
		default:
			return false, fmt.Errorf("NOSPACE alarm kept: etcd member %s has %d bytes in use after its history's compaction, in a file of %d bytes, "+
				"at its quota of %d: the data itself fills it; delete what is not Baton's, or raise etcd's --quota-backend-bytes (the chart's etcd.quota)",
				mem.Name, mem.InUse, mem.Size, mem.Quota)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	for _, mem := range members {
		for _, a := range mem.Alarms {
			if a != pb.AlarmType_NOSPACE.String() {
				continue
			}
			if _, err := m.cli.AlarmDisarm(cctx, &clientv3.AlarmMember{MemberID: mem.ID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
				return false, fmt.Errorf("disarm the NOSPACE alarm of etcd member %s: %w", mem.Name, err)
			}
		}
	}
	m.log.Warn("etcd maintenance: NOSPACE alarm disarmed; etcd takes writes again")
	return true, nil
}

type nopObserver struct{}

func (nopObserver) Saw([]Member)                                      {}
func (nopObserver) Defragmented(string, Reason, time.Duration, error) {}
