package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/baton-dev/baton/internal/policy"
)

// Caller is who the sidecar's callers are, as far as the sidecar knows
// them: the pod it serves and the pod's ServiceAccount. The peer's uid
// and pid come from each connection.
type Caller struct {
	Pod, Namespace, ServiceAccount string
}

// pod names the pod as namespace/name, or name alone outside Kubernetes.
func (c Caller) pod() string {
	if c.Namespace == "" {
		return c.Pod
	}
	return c.Namespace + "/" + c.Pod
}

// Audit counts what the audit log records (package metrics).
type Audit interface {
	// Denied: the lock policy refused a call; action is "lock" or
	// "force_release".
	Denied(action string)
	// ForceReleased: a caller freed someone's lock.
	ForceReleased()
}

// Option configures a Server.
type Option func(*Server)

// WithAudit names the callers in the audit log and counts its events in a.
func WithAudit(c Caller, a Audit) Option {
	return func(s *Server) { s.caller, s.audit = c, a }
}

type nopAudit struct{}

func (nopAudit) Denied(string)  {}
func (nopAudit) ForceReleased() {}

// auditDenied logs and counts a call the lock policy refused.
func (s *Server) auditDenied(ctx context.Context, err error) {
	var f *policy.Forbidden
	if !errors.As(err, &f) {
		return
	}
	s.audit.Denied(f.Action.String())
	s.log.Warn("audit: call refused by the lock policy", append(s.who(ctx),
		slog.String("action", f.Action.String()), slog.String("lock", f.Key), slog.Any("policies", f.Policies), slog.String("why", f.Why))...)
}

// who are the log attributes naming the caller of ctx's request.
func (s *Server) who(ctx context.Context) []any {
	attrs := []any{slog.String("serviceAccount", s.caller.ServiceAccount), slog.String("pod", s.caller.pod())}
	if p, ok := peerOf(ctx); ok {
		attrs = append(attrs, slog.Int("peerUID", int(p.UID)), slog.Int("peerPID", int(p.PID)))
	}
	return attrs
}

// byWhom is the force release's "by", as the coordinator logs it: what the
// caller said, and who it is.
func (s *Server) byWhom(ctx context.Context, by string) string {
	who := fmt.Sprintf("ServiceAccount %q of pod %s", s.caller.ServiceAccount, s.caller.pod())
	if p, ok := peerOf(ctx); ok {
		who += fmt.Sprintf(", uid %d, pid %d", p.UID, p.PID)
	}
	return fmt.Sprintf("%s (%s)", by, who)
}
