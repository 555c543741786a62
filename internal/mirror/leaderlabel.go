package mirror

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/keyspace"
)

// labelLeader gives the leader's pod of the election ref, when the pod
// asks for it (AnnotationLeaderLabel "true"), the label LeaderLabelPrefix +
// the Lease's name, and takes it from every other pod of the namespace:
// a Service selecting that label routes to the leader alone. Pods are read
// past the cache: the controller caches none.
func (m *Mirror) labelLeader(ctx context.Context, ref objectRef, leader keyspace.Holder) error {
	if !m.cfg.LeaderLabels {
		return nil
	}
	label := LeaderLabelPrefix + ref.name
	var labelled corev1.PodList
	if err := m.live.List(ctx, &labelled, client.InNamespace(ref.namespace), client.HasLabels{label}); err != nil {
		return fmt.Errorf("list the pods labelled %s: %w", label, err)
	}
	mine := leader.Pod != "" && !leader.Foreign && leader.Cluster == m.cfg.Cluster && (leader.Namespace == "" || leader.Namespace == ref.namespace)
	has := false
	for _, p := range labelled.Items {
		if mine && p.Name == leader.Pod {
			has = true
			continue
		}
		if err := m.setLabel(ctx, ref.namespace, p.Name, label, nil); err != nil {
			return err
		}
	}
	if !mine || has {
		return nil
	}
	var pod corev1.Pod
	err := m.live.Get(ctx, types.NamespacedName{Namespace: ref.namespace, Name: leader.Pod}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil // not a pod of this cluster's, or gone
	case err != nil:
		return fmt.Errorf("read the leader's pod %s/%s: %w", ref.namespace, leader.Pod, err)
	case pod.Annotations[AnnotationLeaderLabel] != "true":
		return nil
	}
	v := "true"
	return m.setLabel(ctx, ref.namespace, pod.Name, label, &v)
}

// setLabel sets a pod's label, or with value nil removes it.
func (m *Mirror) setLabel(ctx context.Context, ns, pod, label string, value *string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{label: value}}}) // cannot fail
	p := &corev1.Pod{}
	p.Namespace, p.Name = ns, pod
	err := m.client.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("label pod %s/%s: %w", ns, pod, err)
	}
	return nil
}
