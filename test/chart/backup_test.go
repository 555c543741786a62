package chart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// checkBackups: the chart's etcd, and only it, gets the backups'
// StatefulSet, whose pod runs etcd-backup as the controller's service
// account against etcd's client Service, signed in with etcd's CA when the
// chart secures etcd, on a volume of its own.
func checkBackups(t *testing.T, objs []map[string]any, etcd string, external, managed bool) {
	t.Helper()
	sts := component(objs, "StatefulSet", "etcd-backup")
	if external != (len(sts) == 0) {
		t.Fatalf("%d backup StatefulSets with external etcd %v", len(sts), external)
	}
	if external {
		return
	}
	var s appsv1.StatefulSet
	strict(t, sts[0], &s)
	pod := s.Spec.Template.Spec
	if !strings.HasSuffix(pod.ServiceAccountName, "-controller") || len(pod.Containers) != 1 {
		t.Fatalf("backup pod: service account %q, %d containers", pod.ServiceAccountName, len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	scheme := "http"
	if managed {
		scheme = "https"
	}
	// Its metrics address is an argument: the environment is that of
	// `kubectl exec ... etcd-backup --once` too, which refuses one.
	if strings.Join(c.Command, " ") != "/baton-controller etcd-backup --metrics-addr=:8080" || env["BATON_ETCD_ENDPOINTS"] != scheme+"://"+etcd+".baton.svc:2379" ||
		env["BATON_DIR"] != "/backups" || env["BATON_EVERY"] == "" || env["BATON_KEEP"] == "" || env["BATON_METRICS_ADDR"] != "" ||
		len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("backup container: %v %v, ports %+v", c.Command, env, c.Ports)
	}
	if (env["BATON_ETCD_CA_SECRET"] == etcd+"-ca") != managed {
		t.Errorf("backup's BATON_ETCD_CA_SECRET %q with the chart's secured etcd %v", env["BATON_ETCD_CA_SECRET"], managed)
	}
	if len(s.Spec.VolumeClaimTemplates) != 1 || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/backups" {
		t.Errorf("backup volume: %+v mounted %+v", s.Spec.VolumeClaimTemplates, c.VolumeMounts)
	}
}
