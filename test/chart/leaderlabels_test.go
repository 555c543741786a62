package chart

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestLeaderLabels: controller.leaderLabels gives the controller
// --leader-labels and get, list and patch on pods, with clusterName its
// --cluster-name; off (the default) it has neither.
func TestLeaderLabels(t *testing.T) {
	podsRule := func(objs []map[string]any) bool {
		for _, o := range find(objs, "ClusterRole") {
			var role rbacv1.ClusterRole
			strict(t, o, &role)
			if role.Labels["app.kubernetes.io/component"] != "controller" && !strings.HasSuffix(role.Name, "-controller") {
				continue
			}
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "pods") && slices.Contains(r.APIGroups, "") && slices.Contains(r.Verbs, "patch") {
					return true
				}
			}
		}
		return false
	}
	args := func(objs []map[string]any) string {
		var all []string
		for _, d := range component(objs, "Deployment", "controller") {
			b, _ := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["args"].([]any)
			for _, a := range b {
				all = append(all, a.(string))
			}
		}
		return strings.Join(all, " ")
	}
	off := renderObjects(t, "")
	if podsRule(off) || strings.Contains(args(off), "--leader-labels") {
		t.Errorf("by default the controller may patch pods (%v) or labels leaders: %s", podsRule(off), args(off))
	}
	manifest, err := render(t, "", "--set", "controller.leaderLabels=true", "--set", "clusterName=east")
	if err != nil {
		t.Fatal(err)
	}
	on := objects(t, manifest)
	if !podsRule(on) || !strings.Contains(args(on), "--leader-labels") || !strings.Contains(args(on), "--cluster-name=east") {
		t.Errorf("with controller.leaderLabels: pods rule %v, args %s", podsRule(on), args(on))
	}
}
