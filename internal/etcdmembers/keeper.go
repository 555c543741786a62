package etcdmembers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keeper gives the verdicts and replaces members: see the package's doc.
// It runs on the controller's elected leader, as etcd's root user, and
// needs get, list and patch on the pods of Config.Namespace (the chart's
// Role <release>-controller-etcd-members).
type Keeper struct {
	cfg  Config
	sel  labels.Selector
	etcd *clientv3.Client
	kube client.Client // patches pods
	read client.Reader // lists them, past any cache
	log  *slog.Logger
	said string // the last waiting message logged, said once
}

// New returns a keeper of the cluster of cli, which must be allowed to
// change etcd's membership (its root user, or a cluster without
// authentication). kube patches the member pods, read lists them.
func New(cli *clientv3.Client, kube client.Client, read client.Reader, cfg Config, log *slog.Logger) (*Keeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sel, err := labels.Parse(cfg.Selector)
	if err != nil {
		return nil, fmt.Errorf("label selector of etcd's member pods %q: %w", cfg.Selector, err)
	}
	return &Keeper{cfg: cfg, sel: sel, etcd: cli, kube: kube, read: read, log: log}, nil
}

// Run makes a pass at once and every Config.Interval until ctx ends.
func (k *Keeper) Run(ctx context.Context) error {
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := k.Pass(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("etcd members: pass failed; trying again at the next", "err", err, "in", k.cfg.Interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Action is what a pass did.
type Action string

// Actions.
const (
	// Founded: every member pod was told to found a new cluster.
	Founded Action = "founded"
	// Replaced: a member without data was removed and added back as a
	// learner, its pod told to join.
	Replaced Action = "replaced"
	// Promoted: a learner that caught up became a voting member.
	Promoted Action = "promoted"
)

// Report is what a pass did, for each member it acted on.
type Report map[string]Action

// Pass looks at the member pods and etcd's members once and acts: see the
// package's doc.
func (k *Keeper) Pass(ctx context.Context) (Report, error) {
	pods, err := k.pods(ctx)
	if err != nil {
		return nil, err
	}
	var waiting []Peer
	for _, p := range k.cfg.Peers {
		if pod := pods[p.Name]; pod != nil && atGate(pod) && pod.Annotations[StateAnnotation] == "" {
			waiting = append(waiting, p)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	list, err := k.etcd.MemberList(cctx)
	cancel()
	if err != nil {
		return k.withoutQuorum(ctx, pods, waiting, err)
	}
	k.said = ""
	report := Report{}
	if err := k.promote(ctx, list.Members, report); err != nil {
		return report, err
	}
	if len(waiting) == 0 {
		return report, nil
	}
	// One at a time: the next once this one is promoted.
	return report, k.replace(ctx, pods[waiting[0].Name], waiting[0], list.Members, report)
}

// pods returns the member pods by name, those being deleted left out.
func (k *Keeper) pods(ctx context.Context) (map[string]*corev1.Pod, error) {
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	var list corev1.PodList
	if err := k.read.List(cctx, &list, client.InNamespace(k.cfg.Namespace), client.MatchingLabelsSelector{Selector: k.sel}); err != nil {
		return nil, fmt.Errorf("list etcd's member pods: %w", err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil {
			out[p.Name] = p
		}
	}
	return out, nil
}

// atGate reports whether pod's gate runs: its member has no data and waits
// for a verdict.
func atGate(pod *corev1.Pod) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == GateContainer {
			return s.State.Running != nil
		}
	}
	return false
}

// withoutQuorum acts when etcd gave no list of its members (err): a new
// cluster when every member pod waits at its gate, else nothing.
func (k *Keeper) withoutQuorum(ctx context.Context, pods map[string]*corev1.Pod, waiting []Peer, err error) (Report, error) {
	if len(waiting) == 0 {
		return nil, nil // nothing waits on the keeper; etcd's own alerts tell
	}
	if len(waiting) == len(k.cfg.Peers) {
		report := Report{}
		for _, p := range waiting {
			if err := k.tell(ctx, pods[p.Name], StateNew); err != nil {
				return report, err
			}
			report[p.Name] = Founded
		}
		k.log.Info("etcd: every member started without data and none answers: founding a new cluster", "members", len(waiting))
		return report, nil
	}
	var started []string
	for _, p := range k.cfg.Peers {
		if pod := pods[p.Name]; pod != nil && !atGate(pod) && running(pod) {
			started = append(started, p.Name)
		}
	}
	if len(started) == 0 {
		k.sayOnce("etcd: waiting for every member's pod to start before founding the cluster", "waiting", names(waiting), "members", len(k.cfg.Peers))
		return nil, nil
	}
	k.sayOnce("etcd: members lost their data and etcd has no quorum: nothing is changed. Bring the other members back, or restore etcd from a backup (docs/operations.md, \"Restore etcd from a backup\")",
		"withoutData", names(waiting), "running", started, "err", err)
	return nil, fmt.Errorf("etcd has no quorum (%w) and %v lost their data", err, names(waiting))
}

// running reports whether pod's etcd container runs or ran.
func running(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// replace removes p's old member, adds it back as a learner and tells its
// pod to join, once every other member is started, votes and answers.
func (k *Keeper) replace(ctx context.Context, pod *corev1.Pod, p Peer, members []*pb.Member, report Report) error {
	var old *pb.Member
	for _, m := range members {
		if slices.Contains(m.PeerURLs, p.URL) {
			old = m
			continue
		}
		if why := k.unfit(ctx, m); why != "" {
			k.sayOnce("etcd: a member lost its data; it is replaced once every other member votes and answers", "member", p.Name, "waitingFor", why)
			return nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	if old != nil {
		if _, err := k.etcd.MemberRemove(cctx, old.ID); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return fmt.Errorf("remove etcd member %s (%x), which lost its data: %w", p.Name, old.ID, err)
		}
	}
	added, err := k.etcd.MemberAddAsLearner(cctx, []string{p.URL})
	if err != nil {
		return fmt.Errorf("add etcd member %s back as a learner: %w", p.Name, err)
	}
	if err := k.tell(ctx, pod, StateExisting); err != nil {
		return err
	}
	k.said = ""
	report[p.Name] = Replaced
	k.log.Info("etcd: a member lost its data: removed, added back as a learner, told to join", "member", p.Name, "oldID", fmt.Sprintf("%x", old.GetID()), "newID", fmt.Sprintf("%x", added.Member.ID))
	return nil
}

// unfit says why m cannot carry the cluster while another member is
// replaced: "" when it is started, votes and answers.
func (k *Keeper) unfit(ctx context.Context, m *pb.Member) string {
	switch {
	case m.Name == "" || len(m.ClientURLs) == 0:
		return fmt.Sprintf("member %x to start", m.ID)
	case m.IsLearner:
		return fmt.Sprintf("learner %s to catch up and be promoted", m.Name)
	}
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	if _, err := k.etcd.Status(cctx, m.ClientURLs[0]); err != nil {
		return fmt.Sprintf("member %s to answer (%v)", m.Name, err)
	}
	return ""
}

// promote makes every started learner a voting member; one that has not
// caught up with the leader yet is promoted at a later pass. The call goes
// to the leader itself: a follower forwards it to the leader without the
// caller's identity, which an etcd with authentication refuses ("auth:
// user name is empty").
func (k *Keeper) promote(ctx context.Context, members []*pb.Member, report Report) error {
	var leader string
	for _, m := range members {
		if !m.IsLearner || m.Name == "" {
			continue
		}
		if leader == "" {
			var err error
			if leader, err = k.leader(ctx, members); err != nil {
				return fmt.Errorf("promote etcd learner %s: %w", m.Name, err)
			}
		}
		err := k.promoteAt(ctx, leader, m.ID)
		switch {
		case errors.Is(err, rpctypes.ErrMemberLearnerNotReady):
			k.log.Debug("etcd: the learner is catching up", "member", m.Name)
		case err != nil:
			return fmt.Errorf("promote etcd learner %s at the leader %s: %w", m.Name, leader, err)
		default:
			report[m.Name] = Promoted
			k.log.Info("etcd: the learner caught up and is a voting member again", "member", m.Name)
		}
	}
	return nil
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

// tell gives pod the verdict.
func (k *Keeper) tell(ctx context.Context, pod *corev1.Pod, state string) error {
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	// Optimistic: a pod changed since it was read is looked at again.
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[StateAnnotation] = state
	if err := k.kube.Patch(cctx, pod, patch); err != nil {
		return fmt.Errorf("tell etcd member pod %s %s=%s: %w", pod.Name, StateAnnotation, state, err)
	}
	return nil
}

// sayOnce logs msg unless it was the last said.
func (k *Keeper) sayOnce(msg string, args ...any) {
	if k.said == msg {
		return
	}
	k.said = msg
	k.log.Warn(msg, args...)
}

// names are the peers' names.
func names(peers []Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.Name
	}
	return out
}
