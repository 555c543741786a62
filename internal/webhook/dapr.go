package webhook

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/baton-dev/baton/internal/dapr"
)

// The annotations that turn on Dapr's lock API in a pod's sidecar.
const (
	// AnnotationDapr "true" serves Dapr's lock API where daprd would, so
	// that a Dapr app's SDK finds it: HTTP on 127.0.0.1:3500 and gRPC on
	// 127.0.0.1:50001, with $DAPR_HTTP_PORT and $DAPR_GRPC_PORT in every
	// other container.
	AnnotationDapr = "baton.dev/dapr"
	// AnnotationDaprAppID sets the app id, the key scoping of Dapr's lock
	// stores (keyPrefix appid). Default: the pod's dapr.io/app-id.
	AnnotationDaprAppID = "baton.dev/dapr-app-id"
	// AnnotationDaprIOAppID is Dapr's own app id annotation, which a Dapr
	// app's pods have already.
	AnnotationDaprIOAppID = "dapr.io/app-id"

	// DaprHTTPPort and DaprGRPCPort are daprd's default ports, the SDKs'.
	DaprHTTPPort = 3500
	DaprGRPCPort = 50001

	// DaprBinary is the image's sidecar with Dapr's lock API: the lean
	// sidecar (/baton, the entrypoint) leaves it out, so that pods not
	// speaking Dapr do not pay for it.
	DaprBinary = "/baton-dapr"
)

// daprOverrides is what a pod's annotations say of Dapr's API.
type daprOverrides struct {
	on    bool
	appID string
}

// daprOf reads the Dapr annotations.
func daprOf(annotations map[string]string) (daprOverrides, error) {
	var d daprOverrides
	switch v := annotations[AnnotationDapr]; v {
	case "true":
		d.on = true
	case "", "false":
	default:
		return d, fmt.Errorf("annotation %s %q: want true or false", AnnotationDapr, v)
	}
	d.appID = annotations[AnnotationDaprIOAppID]
	if id, ok := annotations[AnnotationDaprAppID]; ok {
		if !d.on {
			return d, fmt.Errorf("annotation %s: Dapr's lock API is off; add %s: \"true\"", AnnotationDaprAppID, AnnotationDapr)
		}
		d.appID = id
	}
	if d.on {
		if err := (dapr.Config{Stores: dapr.DefaultStores(), AppID: d.appID}).Validate(); err != nil {
			return d, fmt.Errorf("the pod's Dapr app id: %w", err)
		}
	}
	return d, nil
}

// daprArgs are the sidecar's flags for Dapr's API.
func daprArgs(cfg Config, d daprOverrides) []string {
	if !d.on {
		return nil
	}
	args := []string{
		"--dapr-http-addr=127.0.0.1:" + strconv.Itoa(DaprHTTPPort),
		"--dapr-grpc-addr=127.0.0.1:" + strconv.Itoa(DaprGRPCPort),
	}
	if d.appID != "" {
		args = append(args, "--dapr-app-id="+d.appID)
	}
	for _, s := range cfg.DaprStores {
		args = append(args, "--dapr-store="+s)
	}
	return args
}

// daprCommand is the sidecar's command: the image's entrypoint, or
// DaprBinary for a pod that speaks Dapr.
func daprCommand(d daprOverrides) []string {
	if !d.on {
		return nil
	}
	return []string{DaprBinary}
}

// daprEnv tells c's Dapr SDK where the API is, unless c says already.
func daprEnv(c *corev1.Container) {
	for _, e := range []corev1.EnvVar{
		{Name: "DAPR_HTTP_PORT", Value: strconv.Itoa(DaprHTTPPort)},
		{Name: "DAPR_GRPC_PORT", Value: strconv.Itoa(DaprGRPCPort)},
	} {
		if !slices.ContainsFunc(c.Env, func(have corev1.EnvVar) bool { return have.Name == e.Name }) {
			c.Env = append(c.Env, e)
		}
	}
}

// checkDaprStores validates the injector's Dapr stores.
func checkDaprStores(stores []string) error {
	cfg := dapr.Config{}
	for _, s := range stores {
		st, err := dapr.ParseStore(s)
		if err != nil {
			return err
		}
		cfg.Stores = append(cfg.Stores, st)
	}
	if len(cfg.Stores) == 0 {
		return nil
	}
	return cfg.Validate()
}
