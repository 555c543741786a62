package etcdmembers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
// needs list on the pods of Config.Namespace, get and patch on the member
// pods (the chart's Role <release>-controller-etcd-members).
type Keeper struct {
	cfg  Config
	sel  labels.Selector
	etcd *clientv3.Client
	kube client.Client // patches pods
	read client.Reader // lists them, past any cache
	log  *slog.Logger
	now  func() time.Time
	said string // the last waiting message logged, said once
}

// settle is how long a gate must have run before its member is taken to
// be without data: a gate that finds data returns at once, but a kubelet
// may report it running for that moment.
const settle = 10 * time.Second

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
	return &Keeper{cfg: cfg, sel: sel, etcd: cli, kube: kube, read: read, log: log, now: time.Now}, nil
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
		if pod := pods[p.Name]; pod != nil && k.waits(pod) {
			waiting = append(waiting, p)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	list, err := k.etcd.MemberList(cctx)
	cancel()
	if err != nil {
		return k.withoutQuorum(ctx, pods, waiting, err)
	}
	if err := k.founded(ctx, pods); err != nil {
		return nil, err
	}
	report := Report{}
	pending, err := k.promote(ctx, list.Members, report)
	if err != nil {
		return report, err
	}
	if len(waiting) == 0 {
		if !pending {
			k.said = "" // all is well: the next trouble is told again
		}
		return report, nil
	}
	// One at a time: the next once this one is promoted.
	return report, k.replace(ctx, waiting[0], waiting, list.Members, report)
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

// waits reports whether pod's member has no data and waits for a verdict:
// its gate has run for settle, and it was given none.
func (k *Keeper) waits(pod *corev1.Pod) bool {
	if pod.Annotations[StateAnnotation] != "" {
		return false
	}
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == GateContainer {
			return s.State.Running != nil && k.now().Sub(s.State.Running.StartedAt.Time) >= settle
		}
	}
	return false
}

// atGate reports whether pod's gate runs.
func atGate(pod *corev1.Pod) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == GateContainer {
			return s.State.Running != nil
		}
	}
	return false
}

// replace removes p's old member, adds it back as a learner and tells its
// pod to join, once every other member is started, votes and answers (but
// those whose pods wait too: etcd refuses a removal that would lose its
// quorum). Before the removal, which cannot be undone, it makes sure the
// member is gone: its pod, read again, still waits, and the old member
// does not answer.
func (k *Keeper) replace(ctx context.Context, p Peer, waiting []Peer, members []*pb.Member, report Report) error {
	var old *pb.Member
	for _, m := range members {
		if slices.Contains(m.PeerURLs, p.URL) {
			old = m
			continue
		}
		if slices.ContainsFunc(waiting, func(w Peer) bool { return slices.Contains(m.PeerURLs, w.URL) }) {
			continue
		}
		if why := k.unfit(ctx, m); why != "" {
			k.sayOnce("etcd: a member lost its data; it is replaced once every other member votes and answers", "member", p.Name, "waitingFor", why)
			return nil
		}
	}
	pod, err := k.stillWaits(ctx, p.Name)
	if err != nil || pod == nil {
		return err
	}
	if old != nil && len(old.ClientURLs) > 0 {
		sctx, scancel := context.WithTimeout(ctx, min(k.cfg.Timeout, 3*time.Second))
		_, err := k.etcd.Status(sctx, old.ClientURLs[0])
		scancel()
		if err == nil {
			return fmt.Errorf("etcd member %s answers at %s though its pod waits at its gate: not replaced", p.Name, old.ClientURLs[0])
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
	cluster := joining(added.Members, added.Member.ID, p.Name)
	if err := k.tell(ctx, pod, map[string]*string{StateAnnotation: ptr(StateExisting), ClusterAnnotation: &cluster}); err != nil {
		return err
	}
	k.said = ""
	report[p.Name] = Replaced
	k.log.Info("etcd: a member lost its data: removed, added back as a learner, told to join", "member", p.Name, "oldID", fmt.Sprintf("%x", old.GetID()), "newID", fmt.Sprintf("%x", added.Member.ID))
	return nil
}

// stillWaits reads pod name again, past any cache, and returns it if it
// still waits for a verdict; nil if not.
func (k *Keeper) stillWaits(ctx context.Context, name string) (*corev1.Pod, error) {
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	var pod corev1.Pod
	if err := k.read.Get(cctx, client.ObjectKey{Namespace: k.cfg.Namespace, Name: name}, &pod); err != nil {
		return nil, fmt.Errorf("read etcd member pod %s again: %w", name, err)
	}
	if pod.DeletionTimestamp != nil || !k.waits(&pod) {
		return nil, nil
	}
	return &pod, nil
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

// tell sets (or, for nil, removes) annotations of pod.
func (k *Keeper) tell(ctx context.Context, pod *corev1.Pod, annotations map[string]*string) error {
	cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	// Optimistic: a pod changed since it was read is looked at again.
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for key, v := range annotations {
		if v == nil {
			delete(pod.Annotations, key)
		} else {
			pod.Annotations[key] = *v
		}
	}
	if err := k.kube.Patch(cctx, pod, patch); err != nil {
		return fmt.Errorf("annotate etcd member pod %s: %w", pod.Name, err)
	}
	return nil
}

func ptr(s string) *string { return &s }

// initialCluster is peers as etcd's --initial-cluster.
func initialCluster(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.Name + "=" + p.URL
	}
	return strings.Join(parts, ",")
}

// joining is the --initial-cluster of member id, named name, which was
// just added to members: what etcdctl member add prints.
func joining(members []*pb.Member, id uint64, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == id {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ",")
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
