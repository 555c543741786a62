package highwater

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The ConfigMap's keys.
const (
	keyRevision = "revision"           // the high-water mark: the highest etcd revision seen
	keyRate     = "revisionsPerSecond" // the fastest the revision was seen to grow
	keyScopes   = "scopes"             // the scopes seen in etcd, comma-separated
	keyCluster  = "clusterID"          // etcd's cluster id when it was seen, in hex
)

// record is the ConfigMap as last read or written.
type record struct {
	revision        int64
	rate            float64
	scopes          []string
	resourceVersion string // empty: there is none yet
}

// behind reports whether k knows more than the record holds: a higher
// mark, a faster rate (by a quarter), or more scopes.
func (r record) behind(k *Keeper) bool {
	return k.mark > r.revision || k.rate > r.rate*1.25 || !slices.Equal(k.seen, r.scopes)
}

// load reads the ConfigMap, and takes in what it knows; none is a mark of 0.
func (k *Keeper) load(ctx context.Context) error {
	var cm corev1.ConfigMap
	err := k.read.Get(ctx, client.ObjectKey{Namespace: k.cfg.Namespace, Name: k.cfg.Name}, &cm)
	if apierrors.IsNotFound(err) {
		k.rec = record{}
		return nil
	}
	if err != nil {
		return err
	}
	rev, err := parseMark(cm.Data[keyRevision])
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", k.cfg.Namespace, k.cfg.Name, err)
	}
	rate, _ := strconv.ParseFloat(cm.Data[keyRate], 64)
	var scopes []string
	if v := cm.Data[keyScopes]; v != "" {
		scopes = merge(nil, strings.Split(v, ","))
	}
	k.rec = record{revision: rev, rate: rate, scopes: scopes, resourceVersion: cm.ResourceVersion}
	k.mark, k.rate, k.seen = max(k.mark, rev), max(k.rate, rate), merge(k.seen, scopes)
	if c, err := strconv.ParseUint(cm.Data[keyCluster], 16, 64); err == nil && k.cluster == 0 {
		k.cluster = c
	}
	return nil
}

// parseMark reads the revision key; none is 0.
func parseMark(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev < 0 {
		return 0, fmt.Errorf("%s %q is not an etcd revision: set it to the highest revision etcd reached, or delete the ConfigMap only if no resource keeps the fences granted so far", keyRevision, v)
	}
	return rev, nil
}

// save writes what k knows into the ConfigMap, when the ConfigMap holds
// less; another writer's change meanwhile is read and merged, and a
// ConfigMap deleted meanwhile is made again.
func (k *Keeper) save(ctx context.Context) error {
	for range 3 {
		if !k.rec.behind(k) {
			return nil
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.cfg.Namespace, Name: k.cfg.Name, ResourceVersion: k.rec.resourceVersion,
				Labels:      map[string]string{"app.kubernetes.io/name": "baton", "app.kubernetes.io/component": "fences"},
				Annotations: map[string]string{"baton.dev/about": "the highest etcd revision Baton's etcd reached: no fence at or below it is granted again (see docs/reliability.md, Fences after an etcd restore)"}},
			Data: map[string]string{
				keyRevision: strconv.FormatInt(k.mark, 10),
				keyRate:     strconv.FormatFloat(k.rate, 'f', 1, 64),
				keyScopes:   strings.Join(k.seen, ","),
				keyCluster:  strconv.FormatUint(k.cluster, 16),
			},
		}
		var err error
		if k.rec.resourceVersion == "" {
			err = k.kube.Create(ctx, cm)
		} else {
			err = k.kube.Update(ctx, cm)
		}
		if err == nil {
			k.rec = record{revision: k.mark, rate: k.rate, scopes: k.seen, resourceVersion: cm.ResourceVersion}
			k.savedAt = k.now()
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
			return err
		}
		if err := k.load(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("save the fences' high-water mark: ConfigMap %s/%s keeps changing", k.cfg.Namespace, k.cfg.Name)
}
