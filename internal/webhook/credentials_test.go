package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestInjectionEnsuresCredentials: with the controller keeping etcd's
// credentials, the injector gives the pod's namespace its Secret before
// it answers, and refuses the pod, saying why, when it cannot.
func TestInjectionEnsuresCredentials(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.EtcdTLSSecret, cfg.EtcdClientCert = "baton-etcd-client", true
	var asked []string
	var told []Outcome
	fail := error(nil)
	inj, err := NewInjector(cfg, s, WithCredentials(func(_ context.Context, ns string) error {
		asked = append(asked, ns)
		return fail
	}), OnOutcome(func(o Outcome) { told = append(told, o) }))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(appPod(nil))
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team-a"}}
	req.Object.Raw = raw
	if resp := inj.Handle(context.Background(), req); !resp.Allowed || len(resp.Patches) == 0 || strings.Join(asked, ",") != "team-a" {
		t.Fatalf("allowed %v with %d patches, credentials asked for %v", resp.Allowed, len(resp.Patches), asked)
	}
	fail = errors.New("etcd is out of reach")
	resp := inj.Handle(context.Background(), req)
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable ||
		!strings.Contains(resp.Result.Message, "namespace team-a") || !strings.Contains(resp.Result.Message, "etcd is out of reach") {
		t.Errorf("credentials failing: allowed %v, %+v", resp.Allowed, resp.Result)
	}
	// Then a pod whose annotation is wrong, and one not labelled.
	bad := appPod(map[string]string{AnnotationMemoryLimit: "lots"})
	req.Object.Raw, _ = json.Marshal(bad)
	inj.Handle(context.Background(), req)
	other := appPod(nil)
	other.Labels = nil
	req.Object.Raw, _ = json.Marshal(other)
	inj.Handle(context.Background(), req)
	if want := []Outcome{Injected, Failed, Refused, Skipped}; !slices.Equal(told, want) {
		t.Errorf("outcomes told %v, want %v (the metric baton_controller_injections_total counts them)", told, want)
	}
}
