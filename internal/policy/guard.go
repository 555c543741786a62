package policy

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrNoPolicy is a Guard's answer while it knows no policy in force: at
// start, before its source was read, or when the source cannot be read or
// holds an invalid document. A sidecar then refuses (fails closed) rather
// than guess.
var ErrNoPolicy = errors.New("no lock policy known")

// Guard holds the policy in force for one sidecar, whose pod runs as one
// ServiceAccount, and checks calls against it. Its source (etcd or a
// file) sets it as the policy changes; checking is a lock-free read.
type Guard struct {
	sa     string
	source string
	log    *slog.Logger
	// onChange, when not nil, is called after each change of the policy
	// in force (for a metric).
	onChange func()

	mu  sync.Mutex // serializes Set and Fail, so that logs come in order
	cur atomic.Pointer[state]
}

type state struct {
	doc     Document
	version string
	err     error // why no policy is in force; doc is unused then
}

// NewGuard returns a Guard for a sidecar whose pod runs as ServiceAccount
// sa (empty: none known), with no policy in force until its source, named
// by source in messages, sets one. onChange, when not nil, is called after
// each change of the policy in force.
func NewGuard(sa, source string, log *slog.Logger, onChange func()) *Guard {
	g := &Guard{sa: sa, source: source, log: log, onChange: onChange}
	g.cur.Store(&state{err: fmt.Errorf("%w: %s was not read yet", ErrNoPolicy, source)})
	return g
}

// Check decides whether this sidecar's callers may do a with key: nil, a
// *Forbidden (ErrForbidden), or ErrNoPolicy when no policy is in force.
func (g *Guard) Check(a Action, key string) error {
	s := g.cur.Load()
	if s.err != nil {
		return s.err
	}
	return s.doc.Check(a, g.sa, key)
}

// Ready reports ErrNoPolicy while no policy is in force.
func (g *Guard) Ready() error { return g.cur.Load().err }

// Set puts d in force. version names it in the log (an etcd revision, a
// file's modification time).
func (g *Guard) Set(d Document, version string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.cur.Swap(&state{doc: d, version: version})
	if prev.err == nil && string(prev.doc.Encode()) == string(d.Encode()) {
		return
	}
	g.log.Info("lock policy in force", "source", g.source, "version", version, "policies", d.Names(),
		"serviceAccount", g.sa, "allows", d.summary(g.sa))
	if g.onChange != nil {
		g.onChange()
	}
}

// SetJSON puts in force the Document stored as b; an empty b is no
// document (the default policy). An invalid document leaves no policy in
// force: every checked call is refused until it is fixed.
func (g *Guard) SetJSON(b []byte, version string) {
	if len(b) == 0 {
		g.Set(Document{}, version)
		return
	}
	d, err := Decode(b)
	if err != nil {
		g.Fail(fmt.Errorf("%s (version %s): %w", g.source, version, err))
		return
	}
	g.Set(d, version)
}

// Fail takes the policy out of force because its source cannot be read
// or is invalid; err says why, and every checked call is refused with it.
func (g *Guard) Fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	err = fmt.Errorf("%w: %w", ErrNoPolicy, err)
	if prev := g.cur.Swap(&state{err: err}); prev.err == nil || prev.err.Error() != err.Error() {
		g.log.Error("no lock policy in force: lock and force release calls are refused until it can be read", "source", g.source, "err", err)
		if g.onChange != nil {
			g.onChange()
		}
	}
}

// summary says, for the log, what sa may do under d.
func (d Document) summary(sa string) string {
	if len(d.Policies) == 0 {
		return "the default: lock any key, no force release"
	}
	var lock, force []string
	for _, p := range d.Policies {
		for _, r := range p.Rules {
			if !r.names(sa) {
				continue
			}
			lock = append(lock, r.Keys...)
			if r.ForceRelease {
				force = append(force, r.Keys...)
			}
		}
	}
	if len(lock) == 0 {
		return "nothing"
	}
	s := "lock " + strings.Join(lock, ", ")
	if len(force) > 0 {
		s += "; force release " + strings.Join(force, ", ")
	}
	return s
}
