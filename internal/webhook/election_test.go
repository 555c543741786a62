package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestInjectElection: baton.dev/election makes the sidecar campaign for
// the pod and tell the leader where the retired election sidecar did
// (127.0.0.1:4040; baton.dev/election-port moves it), with nais/elector's
// environment in every app container; mistakes are refused, changing
// nothing.
func TestInjectElection(t *testing.T) {
	cfg := testConfig()
	for _, tt := range []struct {
		annotations map[string]string
		port        string
	}{
		{map[string]string{AnnotationElection: "jobs/cron"}, "4040"},
		{map[string]string{AnnotationElection: "jobs/cron", AnnotationElectionPort: "6060", AnnotationLeaderLabel: "true"}, "6060"},
	} {
		pod := appPod(tt.annotations)
		if err := Inject(pod, cfg); err != nil {
			t.Fatal(err)
		}
		args := pod.Spec.InitContainers[0].Args
		for _, w := range []string{"--campaign=jobs/cron", "--leader-addr=127.0.0.1:" + tt.port} {
			if !slices.Contains(args, w) {
				t.Errorf("%v: sidecar args %q lack %q", tt.annotations, args, w)
			}
		}
		for _, c := range append(pod.Spec.InitContainers[1:], pod.Spec.Containers...) {
			for name, v := range map[string]string{"ELECTOR_PATH": "127.0.0.1:" + tt.port, "ELECTOR_GET_URL": "http://127.0.0.1:" + tt.port + "/",
				"ELECTOR_SSE_URL": "http://127.0.0.1:" + tt.port + "/sse"} {
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
	off := appPod(nil)
	if err := Inject(off, cfg); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(off.Spec.InitContainers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--campaign") }) || env(&off.Spec.Containers[0], "ELECTOR_PATH") != nil {
		t.Errorf("without %s: a candidacy: %q", AnnotationElection, off.Spec.InitContainers[0].Args)
	}

	elector := appPod(map[string]string{AnnotationElection: "jobs"})
	elector.Spec.Containers = append(elector.Spec.Containers, corev1.Container{Name: "elector", Ports: []corev1.ContainerPort{{ContainerPort: 4040}}})
	for _, tt := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{appPod(map[string]string{AnnotationElection: "a/../b"}), "annotation baton.dev/election"},
		{appPod(map[string]string{AnnotationElectionPort: "6060"}), "campaigns in no election"},
		{appPod(map[string]string{AnnotationElection: "jobs", AnnotationElectionPort: "http"}), "want a port"},
		{elector, "container elector uses port 4040"},
		{appPod(map[string]string{AnnotationElection: ""}), "annotation baton.dev/election"},
		{appPod(map[string]string{AnnotationElection: "jobs", AnnotationElectionPort: "9810"}), "a port the sidecar serves already"},
		{appPod(map[string]string{AnnotationLeaderLabel: "yes"}), `annotation baton.dev/leader-label "yes": want true or false`},
	} {
		before := tt.pod.DeepCopy()
		if err := Inject(tt.pod, cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v; want an error saying %q", tt.pod.Annotations, err, tt.want)
		}
		if len(tt.pod.Spec.InitContainers) != len(before.Spec.InitContainers) {
			t.Errorf("%v: a refused pod was changed", tt.pod.Annotations)
		}
	}
}
