package etcdmembers

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// promote makes every started learner a voting member; one that has not
// caught up with the leader yet is promoted at a later pass. The call goes
// to the leader itself: a follower forwards it to the leader without the
// caller's identity, which an etcd with authentication refuses ("auth:
// user name is empty").
// It reports whether a learner is left.
func (k *Keeper) promote(ctx context.Context, members []*pb.Member, report Report) (bool, error) {
	var leader string
	pending := false
	for _, m := range members {
		if !m.IsLearner {
			continue
		}
		if m.Name == "" {
			pending = true
			k.sayOnce("etcd: a learner has not started yet", "peerURLs", m.PeerURLs)
			continue
		}
		if leader == "" {
			var err error
			if leader, err = k.leader(ctx, members); err != nil {
				return true, fmt.Errorf("promote etcd learner %s: %w", m.Name, err)
			}
		}
		err := k.promoteAt(ctx, leader, m.ID)
		switch {
		case errors.Is(err, rpctypes.ErrMemberLearnerNotReady):
			pending = true
			k.sayOnce("etcd: the learner is catching up with the leader; it is promoted once it has", "member", m.Name)
		case err != nil:
			return true, fmt.Errorf("promote etcd learner %s at the leader %s: %w", m.Name, leader, err)
		default:
			report[m.Name] = Promoted
			k.log.Info("etcd: the learner caught up and is a voting member again", "member", m.Name)
		}
	}
	return pending, nil
}

// leader returns the client URL of the member that leads, as the first
// voting member that answers says.
func (k *Keeper) leader(ctx context.Context, members []*pb.Member) (string, error) {
	urls := map[uint64]string{}
	for _, m := range members {
		if len(m.ClientURLs) > 0 {
			urls[m.ID] = m.ClientURLs[0]
		}
	}
	var errs []error
	for _, m := range members {
		if m.IsLearner || len(m.ClientURLs) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
		st, err := k.etcd.Status(cctx, m.ClientURLs[0])
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if u := urls[st.Leader]; u != "" {
			return u, nil
		}
	}
	return "", fmt.Errorf("no member names a leader: %w", errors.Join(errs...))
}

// promoteAt asks the member at endpoint to promote learner id.
func (k *Keeper) promoteAt(ctx context.Context, endpoint string, id uint64) error {
	conn, err := k.etcd.Dial(endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	_, err = pb.NewClusterClient(conn).MemberPromote(cctx, &pb.MemberPromoteRequest{ID: id})
	if err != nil {
		return rpctypes.Error(err)
	}
	return nil
}
