package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Action is what a caller asks to do with a lock.
type Action int

// The actions a policy governs. Reading locks and releasing or extending
// one's own are not among them: a policy decides who may take a lock,
// never whether its holder may let it go.
const (
	// Lock is acquiring a key: a request, a hold stream, `baton run`.
	Lock Action = iota
	// ForceRelease is freeing a lock whoever holds it.
	ForceRelease
)

// String returns the action as metrics and logs name it.
func (a Action) String() string {
	if a == ForceRelease {
		return "force_release"
	}
	return "lock"
}

// ErrForbidden is wrapped by every refusal of a policy (*Forbidden).
var ErrForbidden = errors.New("forbidden by lock policy")

// Forbidden is a call a policy refuses, and why.
type Forbidden struct {
	Action         Action
	ServiceAccount string
	Key            string
	// Policies are the policies that were in force; none means the
	// default (no LockPolicy in the namespace) refused.
	Policies []string
	// Why says which rules were looked at and what they allow.
	Why string
}

// Error says why the call is refused, naming the policies and rules in
// force.
func (f *Forbidden) Error() string { return f.Why }

// Unwrap makes a Forbidden an ErrForbidden.
func (f *Forbidden) Unwrap() error { return ErrForbidden }

// Check decides whether ServiceAccount sa may do a with key: nil when
// some rule allows it, else a *Forbidden naming the rules in force.
func (d *Document) Check(a Action, sa, key string) error {
	if len(d.Policies) == 0 {
		if a == Lock {
			return nil
		}
		if sa == "" {
			// No ServiceAccount: a sidecar run by hand, outside
			// Kubernetes, where no LockPolicy reaches it.
			return &Forbidden{Action: a, ServiceAccount: sa, Key: key,
				Why: fmt.Sprintf("force release of %q over the socket is refused: no lock policy allows it (the default); "+
					"this sidecar runs outside Kubernetes, so start it with --policy-file FILE, a policy with a rule that has forceRelease: true (see docs/security.md, lock policies)", key)}
		}
		return &Forbidden{Action: a, ServiceAccount: sa, Key: key,
			Why: fmt.Sprintf("force release of %q over the socket is refused: this namespace has no LockPolicy allowing it (the default); "+
				"force release through the Lock object's baton.dev/force-release annotation, or add a LockPolicy rule with forceRelease: true for ServiceAccount %q", key, saName(sa))}
	}
	for _, p := range d.Policies {
		for _, r := range p.Rules {
			if r.grants(a, sa) && r.covers(key) {
				return nil
			}
		}
	}
	return d.refusal(a, sa, key)
}

// refusal says why no rule of d lets sa do a with key.
func (d *Document) refusal(a Action, sa, key string) *Forbidden {
	var granted []string
	for _, p := range d.Policies {
		for i, r := range p.Rules {
			if r.grants(a, sa) {
				granted = append(granted, fmt.Sprintf("%s (LockPolicy %s rule %d)", quoteAll(r.Keys), p.Name, i+1))
			}
		}
	}
	names := d.Names()
	f := &Forbidden{Action: a, ServiceAccount: sa, Key: key, Policies: names}
	verb := "lock"
	if a == ForceRelease {
		verb = "force release"
	}
	if len(granted) == 0 {
		f.Why = fmt.Sprintf("ServiceAccount %q may not %s %q: no rule of this namespace's LockPolicies (%s) lets it %s any key",
			saName(sa), verb, key, strings.Join(names, ", "), verb)
	} else {
		f.Why = fmt.Sprintf("ServiceAccount %q may not %s %q: its rules cover only keys starting with %s, of this namespace's LockPolicies (%s)",
			saName(sa), verb, key, strings.Join(granted, "; "), strings.Join(names, ", "))
	}
	return f
}

// grants reports whether r gives sa action a (on its keys).
func (r Rule) grants(a Action, sa string) bool {
	return r.names(sa) && (a == Lock || r.ForceRelease)
}

func (r Rule) names(sa string) bool {
	for _, s := range r.ServiceAccounts {
		if s == AnyServiceAccount || s == sa {
			return true
		}
	}
	return false
}

func (r Rule) covers(key string) bool {
	for _, k := range r.Keys {
		if k == AnyKey || strings.HasPrefix(key, k) {
			return true
		}
	}
	return false
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func saName(sa string) string {
	if sa == "" {
		return "(none)"
	}
	return sa
}
