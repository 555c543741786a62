package webhook

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/baton-dev/baton/internal/keyspace"
)

// The annotations that make a pod's sidecar a candidate of an election,
// answering who leads as the election sidecars do, so that an app written
// for one of them moves to Baton without a change of code.
const (
	// AnnotationElection names the election the pod campaigns in for as
	// long as its sidecar runs (--campaign), announcing the pod's name;
	// the sidecar tells the leader on 127.0.0.1:4040 (--leader-addr):
	// GET / answers {"name","last_update"}, GET /sse streams it, and every
	// other container gets $ELECTOR_PATH (127.0.0.1:4040), $ELECTOR_GET_URL
	// and $ELECTOR_SSE_URL, as nais/elector's pods do.
	AnnotationElection = "baton.dev/election"
	// AnnotationElectionPort moves that port, e.g. to nais/elector's 6060.
	AnnotationElectionPort = "baton.dev/election-port"
	// AnnotationLeaderLabel "true" asks the controller to label the pod
	// while it leads an election (the mirror's, with --leader-labels):
	// "true" or "false".
	AnnotationLeaderLabel = "baton.dev/leader-label"

	// ElectionPort is the retired Kubernetes election sidecar's port, which
	// its apps ask on localhost.
	ElectionPort = 4040
)

// electionOverrides is what a pod's annotations say of its candidacy.
type electionOverrides struct {
	name string // "" when the pod campaigns in none
	port int32
}

// electionOf reads the election annotations.
func electionOf(annotations map[string]string) (electionOverrides, error) {
	e := electionOverrides{name: annotations[AnnotationElection], port: ElectionPort}
	if v, ok := annotations[AnnotationLeaderLabel]; ok && v != "true" && v != "false" {
		return e, fmt.Errorf("annotation %s %q: want true or false", AnnotationLeaderLabel, v)
	}
	if name, ok := annotations[AnnotationElection]; ok {
		if _, err := keyspace.ParseKey(name); err != nil {
			return e, fmt.Errorf("annotation %s: %w", AnnotationElection, err)
		}
	}
	if v, ok := annotations[AnnotationElectionPort]; ok {
		if e.name == "" {
			return e, fmt.Errorf("annotation %s: the pod campaigns in no election; add %s: NAME", AnnotationElectionPort, AnnotationElection)
		}
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return e, fmt.Errorf("annotation %s %q: want a port, 1 to 65535", AnnotationElectionPort, v)
		}
		e.port = int32(p)
	}
	return e, nil
}

// electionArgs are the sidecar's flags for the pod's candidacy.
func electionArgs(e electionOverrides) []string {
	if e.name == "" {
		return nil
	}
	return []string{"--campaign=" + e.name, "--leader-addr=127.0.0.1:" + strconv.Itoa(int(e.port))}
}

// electionEnv tells c where the leader is answered, as nais/elector's
// pods are told, unless c says already.
func electionEnv(c *corev1.Container, e electionOverrides) {
	addr := "127.0.0.1:" + strconv.Itoa(int(e.port)) // where it listens: not ::1, which localhost may be first
	for _, v := range []corev1.EnvVar{
		{Name: "ELECTOR_PATH", Value: addr},
		{Name: "ELECTOR_GET_URL", Value: "http://" + addr + "/"},
		{Name: "ELECTOR_SSE_URL", Value: "http://" + addr + "/sse"},
	} {
		if !slices.ContainsFunc(c.Env, func(have corev1.EnvVar) bool { return have.Name == v.Name }) {
			c.Env = append(c.Env, v)
		}
	}
}
