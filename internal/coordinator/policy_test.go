package coordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/policy"
)

// TestPolicy: with a policy, an acquire it refuses (try or wait) and a
// force release it refuses come back forbidden and write nothing; allowed
// ones proceed; releasing one's own lock is never refused; and a sidecar
// that knows no policy fails closed, not ready.
func TestPolicy(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	b := newSidecar(t, "pod-b")
	guard := policy.NewGuard("runner", "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	a.c.policy = guard
	if err := a.c.Ready(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, policy.ErrNoPolicy) {
		t.Fatalf("ready with no policy known: %v", err)
	}
	if _, err := a.acquire(t, key(t, "tf/x"), "o", 0); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not read yet") {
		t.Fatalf("acquire with no policy known: %v", err)
	}
	guard.Set(policy.Document{Policies: []policy.Policy{{Name: "p", Rules: []policy.Rule{{ServiceAccounts: []string{"runner"}, Keys: []string{"tf/"}, ForceRelease: true}}}}}, "1")
	if err := a.c.Ready(); err != nil {
		t.Fatal(err)
	}

	g := a.mustAcquire(t, key(t, "tf/x"), "o")
	for _, wait := range []time.Duration{0, time.Second} {
		_, err := a.acquire(t, key(t, "other"), "o", wait)
		var f *policy.Forbidden
		if !errors.As(err, &f) || !errors.Is(err, ErrForbidden) || f.Key != "other" {
			t.Errorf("acquire outside the policy (wait %v): %v", wait, err)
		}
	}
	if cs := b.contenders(t, key(t, "other")); len(cs) != 0 {
		t.Errorf("refused acquires left keys: %v", cs)
	}
	b.mustAcquire(t, key(t, "shared"), "ob")
	if _, err := a.c.ForceRelease(context.Background(), key(t, "shared"), 0, "test"); !errors.Is(err, ErrForbidden) {
		t.Errorf("force release outside the rule: %v", err)
	}
	if first := b.first(t, key(t, "shared")); first == nil {
		t.Error("a refused force release deleted the holder")
	}
	// A narrower policy refuses new acquires, never the holder's release.
	guard.Set(policy.Document{Policies: []policy.Policy{{Name: "p", Rules: []policy.Rule{{ServiceAccounts: []string{"runner"}, Keys: []string{"deploy/"}}}}}}, "2")
	if _, err := a.acquire(t, key(t, "tf/y"), "o", 0); !errors.Is(err, ErrForbidden) {
		t.Errorf("acquire after the change: %v", err)
	}
	if _, err := a.c.Release(context.Background(), g.Key, g.Owner); err != nil {
		t.Errorf("release of a lock the policy no longer covers: %v", err)
	}
}
