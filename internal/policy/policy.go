// Package policy is who may do what with a scope's locks: the rules of a
// namespace's LockPolicy objects, as the controller writes them into etcd
// (or a file gives them), and the Guard with which a sidecar checks each
// call against them. It decides; the coordinator enforces and the socket
// API reports.
//
// A rule names ServiceAccounts and key prefixes: those accounts may lock
// keys under those prefixes and, when the rule says forceRelease, free
// anyone's lock under them. With no policy at all, any key may be locked
// and force release over the socket is refused: operators force release
// through the Lock object's annotation, which Kubernetes RBAC governs.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/baton-dev/baton/internal/keyspace"
)

// AnyKey, in a rule's Keys, covers every key; in ServiceAccounts, every
// ServiceAccount (and a sidecar with none).
const (
	AnyKey            = "*"
	AnyServiceAccount = "*"
)

// ErrInvalid is wrapped by every validation error of a policy.
var ErrInvalid = errors.New("invalid lock policy")

// Rule grants the ServiceAccounts it names the keys it names.
type Rule struct {
	// ServiceAccounts are names of ServiceAccounts of the policy's
	// namespace, or AnyServiceAccount.
	ServiceAccounts []string `json:"serviceAccounts"`
	// Keys are prefixes of lock keys (a plain string prefix: "tenant-"
	// covers "tenant-a/x" and "tenant-b"), or AnyKey.
	Keys []string `json:"keys"`
	// ForceRelease lets these ServiceAccounts free anyone's lock under
	// Keys over the socket (DELETE ...?force=true).
	ForceRelease bool `json:"forceRelease,omitempty"`
}

// Policy is one LockPolicy object: its name and its rules.
type Policy struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Document is every policy in force for one scope, as stored in etcd (at
// keyspace.Layout.Policy) or read from a file. A call is allowed when any
// rule of any policy allows it.
type Document struct {
	Policies []Policy `json:"policies"`
}

// Decode reads a Document and validates it.
func Decode(b []byte) (Document, error) {
	var d Document
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Document{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := d.Validate(); err != nil {
		return Document{}, err
	}
	return d, nil
}

// Encode returns the Document's JSON.
func (d Document) Encode() []byte {
	b, _ := json.Marshal(d) // cannot fail: strings and bools
	return b
}

// Names are the names of d's policies, in order.
func (d Document) Names() []string {
	out := make([]string, len(d.Policies))
	for i, p := range d.Policies {
		out[i] = p.Name
	}
	return out
}

// Validate checks every policy and rule, naming the first fault.
func (d Document) Validate() error {
	var names []string
	for _, p := range d.Policies {
		if p.Name == "" {
			return fmt.Errorf("%w: a policy has no name", ErrInvalid)
		}
		if slices.Contains(names, p.Name) {
			return fmt.Errorf("%w: two policies are named %q", ErrInvalid, p.Name)
		}
		names = append(names, p.Name)
		if len(p.Rules) == 0 {
			return fmt.Errorf("%w: policy %q has no rules", ErrInvalid, p.Name)
		}
		for i, r := range p.Rules {
			if err := r.validate(); err != nil {
				return fmt.Errorf("%w: policy %q rule %d: %w", ErrInvalid, p.Name, i+1, err)
			}
		}
	}
	return nil
}

func (r Rule) validate() error {
	if len(r.ServiceAccounts) == 0 {
		return fmt.Errorf("serviceAccounts is empty; name at least one ServiceAccount, or %q for all", AnyServiceAccount)
	}
	for _, sa := range r.ServiceAccounts {
		if sa == AnyServiceAccount {
			continue
		}
		if err := CheckServiceAccount(sa); err != nil {
			return fmt.Errorf("serviceAccounts: %w", err)
		}
	}
	if len(r.Keys) == 0 {
		return fmt.Errorf("keys is empty; give key prefixes, or %q for every key", AnyKey)
	}
	for _, k := range r.Keys {
		switch k {
		case AnyKey:
		case "":
			return fmt.Errorf("keys: an empty prefix; write %q for every key", AnyKey)
		default:
			if err := keyspace.ValidatePrefix(k); err != nil {
				return fmt.Errorf("keys: %w", err)
			}
		}
	}
	return nil
}

// CheckServiceAccount checks that s can be a ServiceAccount's name.
func CheckServiceAccount(s string) error {
	if !validName(s) {
		return fmt.Errorf("%q is not a ServiceAccount name (lower-case letters, digits, '-' and '.', at most 253)", s)
	}
	return nil
}

// validName reports whether s is a DNS subdomain, as Kubernetes names
// ServiceAccounts.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return s[0] != '-' && s[0] != '.' && s[len(s)-1] != '-' && s[len(s)-1] != '.'
}
