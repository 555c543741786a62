package etcdmaint

import (
	"context"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Member is what a pass saw of one etcd member.
type Member struct {
	// Name and ID are the member's.
	Name string
	ID   uint64
	// Endpoint is the client URL the maintainer asks it at.
	Endpoint string
	// Leader says it led the cluster.
	Leader bool
	// Size is its database file's size; InUse the part of it in use;
	// Quota its space quota (--quota-backend-bytes). All in bytes.
	Size, InUse, Quota int64
	// Revision is etcd's revision as the member answered.
	Revision int64
	// Alarms are the alarms raised on it: "NOSPACE", "CORRUPT".
	Alarms []string
	// Err is why it could not be asked; the sizes are then unknown.
	Err error
}

// Free is the part of the member's file compacted away and not given back.
func (m Member) Free() int64 { return m.Size - m.InUse }

// Reason is why a member is defragmented.
type Reason string

// Reasons, as the log and the metrics name them.
const (
	// Fragmented: the member's file is at least Config.MinSize, and
	// Config.FreeRatio of it is free.
	Fragmented Reason = "fragmented"
	// NearQuota: the file reached Config.QuotaRatio of the quota, and a
	// tenth of it is free.
	NearQuota Reason = "near_quota"
	// NoSpace: etcd's NOSPACE alarm is raised, the member's file is at
	// its quota, and a defragmentation would bring it under (see room).
	NoSpace Reason = "no_space"
)

// roomRatio is the share of its quota a member's file must be under for
// the NOSPACE alarm to be disarmed: disarmed just below the quota, etcd
// would refuse the next writes again.
const roomRatio = 0.95

// room says whether a member's file of size bytes leaves room under its
// quota (an etcd older than 3.6 does not say its quota: then it does).
func room(size, quota int64) bool {
	return quota <= 0 || float64(size) < roomRatio*float64(quota)
}

// reason says whether m is to be defragmented, and why ("" when not).
// While etcd is out of space, m is as the pass saw it after its
// compaction, and it is defragmented when that may give back enough to
// disarm: when its file is at its quota, unless full (zero: none) is m as
// its last defragmentation left it, its data filling the quota, and
// nothing was freed since. A defragmentation stops its member (and the
// lease keep-alives it serves) while it copies its file: while nothing is
// freed, it would give nothing back. Something is freed when keys were
// deleted (etcd's revision moved), or when the member's own compaction
// went on after its defragmentation: each member compacts by itself, and
// a follower on a loaded machine may still be at it when the compaction's
// caller returns. Its data in use then drops; m is defragmented again
// when that drop would bring its file under (see room). (What is in use
// alone cannot tell: a defragmented file is larger than its data, and
// etcd counts what a compaction frees as in use until its next commits.)
func (c Config) reason(m Member, noSpace bool, full Member) Reason {
	switch {
	case m.Err != nil:
		return ""
	case noSpace && m.Quota <= 0:
		return NoSpace
	case noSpace && room(m.Size, m.Quota):
		return ""
	case noSpace && full.Revision != 0 && m.Revision == full.Revision && !room(full.Size-(full.InUse-m.InUse), m.Quota):
		return ""
	case noSpace:
		return NoSpace
	case m.Size >= c.MinSize && float64(m.Free()) >= c.FreeRatio*float64(m.Size):
		return Fragmented
	case m.Quota > 0 && float64(m.Size) >= c.QuotaRatio*float64(m.Quota) && m.Free() >= m.Size/10:
		return NearQuota
	}
	return ""
}

// members asks every member of the cluster for its database's size and
// alarms, the leader last. A member that does not answer is listed with
// its error.
func (m *Maintainer) members(ctx context.Context) ([]Member, error) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	list, err := m.cli.MemberList(cctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd's members: %w", err)
	}
	alarms, err := m.cli.AlarmList(cctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd's alarms: %w", err)
	}
	out := make([]Member, 0, len(list.Members))
	for _, pm := range list.Members {
		mem := Member{Name: pm.Name, ID: pm.ID}
		switch {
		case len(list.Members) == 1:
			// One member: the client's own endpoint reaches it, whatever
			// it advertises (the embedded etcd's port may be 0).
			mem.Endpoint = m.cli.Endpoints()[0]
		case len(pm.ClientURLs) > 0:
			mem.Endpoint = pm.ClientURLs[0]
		default:
			mem.Err = fmt.Errorf("etcd member %s advertises no client URL (it has not started yet)", pm.Name)
		}
		for _, a := range alarms.Alarms {
			if a.MemberID == pm.ID && a.Alarm != pb.AlarmType_NONE {
				mem.Alarms = append(mem.Alarms, a.Alarm.String())
			}
		}
		if mem.Err == nil {
			m.status(ctx, &mem)
		}
		out = append(out, mem)
	}
	slices.SortStableFunc(out, func(a, b Member) int {
		switch {
		case a.Leader == b.Leader:
			return 0
		case b.Leader:
			return -1
		}
		return 1
	})
	return out, nil
}

// status reads mem's sizes and whether it leads.
func (m *Maintainer) status(ctx context.Context, mem *Member) {
	sctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	st, err := m.cli.Status(sctx, mem.Endpoint)
	if err != nil {
		mem.Err = fmt.Errorf("etcd member %s at %s: %w", mem.Name, mem.Endpoint, err)
		return
	}
	mem.Size, mem.InUse, mem.Quota, mem.Revision = st.DbSize, st.DbSizeInUse, st.DbSizeQuota, st.Header.Revision
	mem.Leader = st.Leader == st.Header.MemberId
}
