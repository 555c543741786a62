package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/baton-dev/baton/internal/webhook"
)

// checkProxy checks a rendering's etcd proxy: with etcd.proxy, a DaemonSet
// of etcd's gRPC proxy that speaks the external etcd's TLS with the
// sidecars' certificate, a Service that keeps each pod on its node's
// proxy, and injected sidecars that reach etcd through it, without the
// certificate but with their user; without it, none.
func checkProxy(t *testing.T, objs []map[string]any, cfg webhook.Config, proxied bool) {
	t.Helper()
	daemons := find(objs, "DaemonSet")
	if proxied != (len(daemons) == 1) || len(daemons) > 1 {
		t.Fatalf("%d DaemonSets with etcd.proxy %v", len(daemons), proxied)
	}
	if !proxied {
		return
	}
	const endpoint = "http://baton-etcd-proxy.baton.svc:23791"
	if !slices.Equal(cfg.EtcdEndpoints, []string{endpoint}) || cfg.EtcdTLSSecret != "" || cfg.EtcdAuthSecret != "baton-etcd-user" {
		t.Errorf("injected sidecars reach etcd at %v with TLS secret %q and user secret %q, want %s, none and baton-etcd-user",
			cfg.EtcdEndpoints, cfg.EtcdTLSSecret, cfg.EtcdAuthSecret, endpoint)
	}
	var ds appsv1.DaemonSet
	strict(t, daemons[0], &ds)
	c := ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"grpc-proxy", "start", "--endpoints=https://etcd-a.example.internal:2379,https://etcd-b.example.internal:2379",
		"--listen-addr=0.0.0.0:23791", "--cacert=/etc/etcd/tls/ca.crt", "--cert=/etc/etcd/tls/tls.crt", "--key=/etc/etcd/tls/tls.key"} {
		if !slices.Contains(c.Command, want) {
			t.Errorf("the proxy's command %v lacks %s", c.Command, want)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.TCPSocket == nil {
		t.Errorf("the proxy's readiness probe %+v: with etcd's authentication on, its health check (no user) fails; want a TCP probe", c.ReadinessProbe)
	}
	if v := ds.Spec.Template.Spec.Volumes; !slices.ContainsFunc(v, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "baton-etcd-tls" }) {
		t.Errorf("the proxy's volumes %+v lack the etcd TLS secret", v)
	}
	if tol := ds.Spec.Template.Spec.Tolerations; len(tol) != 1 || tol[0].Operator != corev1.TolerationOpExists {
		t.Errorf("the proxy tolerates %+v, want every taint: a node without one leaves its pods without etcd", tol)
	}
	for _, o := range find(objs, "Service") {
		var svc corev1.Service
		strict(t, o, &svc)
		if !strings.HasSuffix(svc.Name, "-etcd-proxy") {
			continue
		}
		if p := svc.Spec.InternalTrafficPolicy; p == nil || *p != corev1.ServiceInternalTrafficPolicyLocal || svc.Spec.Ports[0].Port != 23791 {
			t.Errorf("the proxy's Service %+v: want port 23791, internalTrafficPolicy Local (each pod its own node's proxy)", svc.Spec)
		}
		return
	}
	t.Error("no Service for the proxy")
}
