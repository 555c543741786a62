package etcdmembers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// withoutQuorum acts when etcd gave no list of its members (err): it
// founds a new cluster when every member pod waits at its gate, or is part
// of a founding begun at an earlier pass (cut short); else it does nothing.
func (k *Keeper) withoutQuorum(ctx context.Context, pods map[string]*corev1.Pod, waiting []Peer, err error) (Report, error) {
	if len(waiting) == 0 {
		return nil, nil // nothing waits on the keeper; etcd's own alerts tell
	}
	founding := ""
	for _, pod := range pods {
		if f := pod.Annotations[FoundingAnnotation]; f != "" {
			founding = f
		}
	}
	all := true
	for _, p := range k.cfg.Peers {
		pod := pods[p.Name]
		all = all && pod != nil && (k.waits(pod) || (founding != "" && pod.Annotations[FoundingAnnotation] == founding))
	}
	if all {
		if founding == "" {
			founding = k.now().UTC().Format(time.RFC3339Nano)
		}
		report := Report{}
		for _, p := range waiting {
			all := initialCluster(k.cfg.Peers)
			if err := k.tell(ctx, pods[p.Name], map[string]*string{StateAnnotation: ptr(StateNew), ClusterAnnotation: &all, FoundingAnnotation: &founding}); err != nil {
				return report, err
			}
			report[p.Name] = Founded
		}
		k.log.Info("etcd: every member started without data and none answers: founding a new cluster", "members", len(k.cfg.Peers), "told", names(waiting), "founding", founding)
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
	k.sayOnce("etcd: members lost their data and etcd has no quorum: nothing is changed. Bring the other members back, or restore etcd from a backup (docs/operations.md, \"etcd's backups\")",
		"withoutData", names(waiting), "running", started, "err", err)
	return nil, nil
}

// founded clears the founding's mark from the member pods once etcd has
// a quorum: a pod that keeps its data must never count as founding later.
func (k *Keeper) founded(ctx context.Context, pods map[string]*corev1.Pod) error {
	for _, p := range k.cfg.Peers {
		if pod := pods[p.Name]; pod != nil && pod.Annotations[FoundingAnnotation] != "" {
			if err := k.tell(ctx, pod, map[string]*string{FoundingAnnotation: nil}); err != nil {
				return err
			}
		}
	}
	return nil
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
