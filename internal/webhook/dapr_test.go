package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestInjectDapr: baton.dev/dapr serves Dapr's lock API where daprd would,
// with the app id of dapr.io/app-id (or baton.dev/dapr-app-id), the
// injector's stores, and the SDKs' environment in every app container.
func TestInjectDapr(t *testing.T) {
	cfg := testConfig()
	cfg.DaprStores = []string{"name=lockstore,keyPrefix=name"}
	for _, tt := range []struct {
		annotations map[string]string
		wantID      string
	}{
		{map[string]string{AnnotationDapr: "true", AnnotationDaprIOAppID: "orders"}, "orders"},
		{map[string]string{AnnotationDapr: "true", AnnotationDaprIOAppID: "orders", AnnotationDaprAppID: "billing"}, "billing"},
		{map[string]string{AnnotationDapr: "true"}, ""},
	} {
		pod := appPod(tt.annotations)
		if err := Inject(pod, cfg); err != nil {
			t.Fatal(err)
		}
		args := pod.Spec.InitContainers[0].Args
		if cmd := pod.Spec.InitContainers[0].Command; !slices.Equal(cmd, []string{"/baton-dapr"}) {
			t.Errorf("%v: the sidecar's command %q, want /baton-dapr", tt.annotations, cmd)
		}
		want := []string{"--dapr-http-addr=127.0.0.1:3500", "--dapr-grpc-addr=127.0.0.1:50001", "--dapr-store=name=lockstore,keyPrefix=name"}
		if tt.wantID != "" {
			want = append(want, "--dapr-app-id="+tt.wantID)
		}
		for _, w := range want {
			if !slices.Contains(args, w) {
				t.Errorf("%v: sidecar args %q lack %q", tt.annotations, args, w)
			}
		}
		if tt.wantID == "" && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--dapr-app-id") }) {
			t.Errorf("%v: an app id in %q", tt.annotations, args)
		}
		for _, c := range append(pod.Spec.InitContainers[1:], pod.Spec.Containers...) {
			for name, v := range map[string]string{"DAPR_HTTP_PORT": "3500", "DAPR_GRPC_PORT": "50001"} {
				if e := env(&c, name); e == nil || e.Value != v {
					t.Errorf("container %s: %s %+v, want %s", c.Name, name, e, v)
				}
			}
		}
		again := pod.DeepCopy()
		if err := Inject(again, cfg); err != nil || len(again.Spec.Containers[0].Env) != len(pod.Spec.Containers[0].Env) {
			t.Errorf("a second injection changed the app's environment: %v", err)
		}
	}

	off := appPod(map[string]string{AnnotationDaprIOAppID: "orders"})
	if err := Inject(off, cfg); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(off.Spec.InitContainers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--dapr") }) || env(&off.Spec.Containers[0], "DAPR_HTTP_PORT") != nil ||
		off.Spec.InitContainers[0].Command != nil {
		t.Errorf("without %s: Dapr's API on: %q", AnnotationDapr, off.Spec.InitContainers[0].Args)
	}

	daprd := appPod(map[string]string{AnnotationDapr: "true"})
	daprd.Spec.Containers = append(daprd.Spec.Containers, corev1.Container{Name: "daprd", Ports: []corev1.ContainerPort{{ContainerPort: 3500}}})
	for _, tt := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{appPod(map[string]string{AnnotationDapr: "yes"}), `annotation baton.dev/dapr "yes": want true or false`},
		{appPod(map[string]string{AnnotationDaprAppID: "orders"}), "Dapr's lock API is off"},
		{appPod(map[string]string{AnnotationDapr: "true", AnnotationDaprIOAppID: "a||b"}), "may not contain"},
		{daprd, "container daprd uses port 3500"},
	} {
		before := tt.pod.DeepCopy()
		if err := Inject(tt.pod, cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v; want an error saying %q", tt.pod.Annotations, err, tt.want)
		}
		if len(tt.pod.Spec.InitContainers) != len(before.Spec.InitContainers) {
			t.Errorf("%v: a refused pod was changed", tt.pod.Annotations)
		}
	}

	bad := testConfig()
	bad.DaprStores = []string{"name=a/b"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "daprStores") {
		t.Errorf("a bad Dapr store: %v", err)
	}
	bad = testConfig()
	bad.HealthPort = 3500
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "daprd's") {
		t.Errorf("the health port on daprd's: %v", err)
	}
}
