package chart

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestUserRoles: the chart adds Baton's resources to Kubernetes' default
// roles: view reads Locks and LockPolicies and writes nothing; admin (a
// namespace's owner) also writes LockPolicies and annotates Locks for a
// force release; edit may not change who may lock what.
func TestUserRoles(t *testing.T) {
	needCluster(t)
	eachRendering(t, func(t *testing.T, variant, manifest string) {
		roles := map[string][]rbacv1.PolicyRule{}
		for _, o := range find(objects(t, manifest), "ClusterRole") {
			var r rbacv1.ClusterRole
			strict(t, o, &r)
			for _, to := range []string{"view", "edit", "admin"} {
				if r.Labels["rbac.authorization.k8s.io/aggregate-to-"+to] == "true" {
					roles[to] = append(roles[to], r.Rules...)
				}
			}
		}
		for _, tt := range []struct {
			role, verb, resource string
			want                 bool
		}{
			{"view", "list", "locks", true},
			{"view", "watch", "lockpolicies", true},
			{"view", "patch", "locks", false},
			{"view", "create", "lockpolicies", false},
			{"edit", "get", "lockpolicies", true},
			{"edit", "update", "lockpolicies", false},
			{"admin", "create", "lockpolicies", true},
			{"admin", "delete", "lockpolicies", true},
			{"admin", "patch", "locks", true},
			{"admin", "create", "locks", false},
		} {
			if got := allows(roles[tt.role], tt.verb, tt.resource); got != tt.want {
				t.Errorf("%s %s %s: %v, want %v", tt.role, tt.verb, tt.resource, got, tt.want)
			}
		}
	})
}

// allows reports whether rules grant verb on resource of baton.dev.
func allows(rules []rbacv1.PolicyRule, verb, resource string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "baton.dev") && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestControllerReadsNoForeignSecrets: whatever the variant, the
// controller may not list, watch or read Secrets it did not make: its
// rules on Secrets name them, but for create.
func TestControllerReadsNoForeignSecrets(t *testing.T) {
	needCluster(t)
	eachRendering(t, func(t *testing.T, variant, manifest string) {
		objs := objects(t, manifest)
		named := 0
		for _, kind := range []string{"ClusterRole", "Role"} {
			for _, o := range find(objs, kind) {
				var r rbacv1.ClusterRole // a Role's fields are the same
				strict(t, map[string]any{"metadata": o["metadata"], "rules": o["rules"]}, &r)
				for _, rule := range r.Rules {
					if !slices.Contains(rule.Resources, "secrets") && !slices.Contains(rule.Resources, "*") {
						continue
					}
					if len(rule.ResourceNames) > 0 {
						named++
						continue
					}
					if !slices.Equal(rule.Verbs, []string{"create"}) {
						t.Errorf("%s %s lets the controller %v every Secret", kind, r.Name, rule.Verbs)
					}
				}
			}
		}
		if managed := managedEtcd(variant); managed != (named == 2) {
			t.Errorf("%d rules naming Secrets with the chart's secured etcd %v; want its CA's and etcd's, and the namespaces' client Secret", named, managed)
		}
	})
}
