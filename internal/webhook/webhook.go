package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the webhook server serves the injector; the chart's
// MutatingWebhookConfiguration points at it.
const Path = "/inject-v1-pod"

// Injector is the admission handler: it patches each pod created with the
// label baton.dev/inject=true as Inject says, and refuses one whose
// annotations or names conflict, saying why.
type Injector struct {
	cfg         Config
	decoder     admission.Decoder
	credentials func(ctx context.Context, namespace string) error
	outcome     func(Outcome)
}

// Outcome is what the injector answered a pod's admission.
type Outcome string

// The outcomes of an admission.
const (
	// Injected: the pod was admitted with the sidecar.
	Injected Outcome = "injected"
	// Skipped: the pod was admitted as it was (not a creation, not
	// labelled, or with the sidecar already).
	Skipped Outcome = "skipped"
	// Refused: the pod's annotations or names conflict with the sidecar's;
	// its creator was told why.
	Refused Outcome = "refused"
	// Failed: the injector could not answer (an undecodable pod, or the
	// namespace's etcd credentials not made); with the chart's
	// failurePolicy Fail, the pod is not created.
	Failed Outcome = "failed"
)

// Outcomes lists every Outcome.
func Outcomes() []Outcome { return []Outcome{Injected, Skipped, Refused, Failed} }

// OnOutcome makes the injector tell f what it answered each admission.
func OnOutcome(f func(Outcome)) Option {
	return func(i *Injector) { i.outcome = f }
}

// Option configures an Injector.
type Option func(*Injector)

// WithCredentials makes the injector call ensure for the namespace of each
// pod it injects, before answering: the namespace's etcd credentials
// (Config.EtcdTLSSecret) are then there before the pod is. A pod whose
// namespace cannot be given them is refused, saying why.
func WithCredentials(ensure func(ctx context.Context, namespace string) error) Option {
	return func(i *Injector) { i.credentials = ensure }
}

// NewInjector returns an Injector for cfg, which must be valid.
func NewInjector(cfg Config, scheme *runtime.Scheme, opts ...Option) (*Injector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	i := &Injector{cfg: cfg, decoder: admission.NewDecoder(scheme)}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}

// Register serves the injector on srv at Path.
func (i *Injector) Register(srv crwebhook.Server) {
	srv.Register(Path, &crwebhook.Admission{Handler: i})
}

// Handle implements admission.Handler.
func (i *Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp := i.handle(ctx, req)
	if i.outcome != nil {
		i.outcome(outcomeOf(resp))
	}
	return resp
}

// outcomeOf classifies an answer of handle.
func outcomeOf(resp admission.Response) Outcome {
	switch {
	case resp.Allowed && len(resp.Patches) > 0:
		return Injected
	case resp.Allowed:
		return Skipped
	case resp.Result != nil && resp.Result.Code == http.StatusForbidden:
		return Refused
	default:
		return Failed
	}
}

func (i *Injector) handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("Baton injects sidecars into pods only when they are created")
	}
	pod := &corev1.Pod{}
	if err := i.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	// The webhook's object selector sends only labelled pods; this holds
	// should it be configured without one.
	if pod.Labels[LabelInject] != "true" {
		return admission.Allowed("not labelled " + LabelInject + "=true")
	}
	if err := Inject(pod, i.cfg); err != nil {
		return admission.Denied("Baton sidecar injection: " + err.Error())
	}
	if i.credentials != nil {
		if err := i.credentials(ctx, req.Namespace); err != nil {
			return admission.Errored(http.StatusServiceUnavailable,
				fmt.Errorf("baton sidecar injection: cannot give namespace %s its etcd credentials (Secret %s), try again: %w", req.Namespace, i.cfg.EtcdTLSSecret, err))
		}
	}
	patched, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, patched)
}
