package chart

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestEtcdHistoryAndQuota: etcd compacts its history periodically, keeping
// etcd.history (10m by default), with the space quota of etcd.quota.
func TestEtcdHistoryAndQuota(t *testing.T) {
	needCluster(t)
	for _, c := range []struct {
		set     []string
		history string
	}{{nil, "10m"}, {[]string{"--set", "etcd.history=1m", "--set", "etcd.quota=67108864"}, "1m"}} {
		manifest, err := render(t, "", c.set...)
		if err != nil {
			t.Fatal(err)
		}
		sets := component(objects(t, manifest), "StatefulSet", "etcd")
		if len(sets) != 1 {
			t.Fatalf("%v: %d etcd StatefulSets", c.set, len(sets))
		}
		var sts appsv1.StatefulSet
		strict(t, sets[0], &sts)
		quota := "1073741824"
		if c.set != nil {
			quota = "67108864"
		}
		args := sts.Spec.Template.Spec.Containers[0].Command
		for _, want := range []string{"--auto-compaction-mode=periodic", "--auto-compaction-retention=" + c.history, "--quota-backend-bytes=" + quota} {
			if !slices.Contains(args, want) {
				t.Errorf("%v: etcd's arguments %v have no %s", c.set, args, want)
			}
		}
	}
}
