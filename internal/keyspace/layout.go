package keyspace

import (
	"fmt"
	"strings"
)

// Layout builds the etcd keys of one scope.
type Layout struct {
	scope string
	base  string // Root + scope + "/locks/"
}

// NewLayout returns the layout of scope, which must pass ValidateScope.
func NewLayout(scope string) (Layout, error) {
	if err := ValidateScope(scope); err != nil {
		return Layout{}, err
	}
	return Layout{scope: scope, base: Root + scope + "/locks/"}, nil
}

// Scope returns the scope this layout belongs to.
func (l Layout) Scope() string { return l.scope }

// Base is the prefix of every contender key of the scope.
func (l Layout) Base() string { return l.base }

// LockPrefix is the prefix of lock k's contender keys, ending in "/". It is
// the name to give `etcdctl lock` (without the trailing slash) and the
// prefix a concurrency.Mutex on the same lock uses.
func (l Layout) LockPrefix(k Key) string { return l.base + Escape(k.s) + "/" }

// MutexName is the name under which etcd's concurrency.Mutex and
// `etcdctl lock` contend for lock k.
func (l Layout) MutexName(k Key) string { return l.base + Escape(k.s) }

// ContenderKey is the key a session whose (first) lease has id lease writes
// to contend for lock k: the layout of concurrency.Mutex, the lease id in
// hex.
func (l Layout) ContenderKey(k Key, lease int64) string {
	return fmt.Sprintf("%s%x", l.LockPrefix(k), lease)
}

// ListPrefix is the etcd prefix of every lock whose key starts with p, a
// string that passed ValidatePrefix.
func (l Layout) ListPrefix(p string) string { return l.base + Escape(p) }

// ParseContender splits an etcd contender key of this scope into its lock
// key and the rest (the lease id in hex for Baton and etcdctl). ok is false
// for keys that are not contender keys of this scope.
func (l Layout) ParseContender(etcdKey string) (k Key, lockPrefix string, ok bool) {
	rest, found := strings.CutPrefix(etcdKey, l.base)
	if !found {
		return Key{}, "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return Key{}, "", false
	}
	k, err := ParseKey(Unescape(rest[:i]))
	if err != nil {
		return Key{}, "", false
	}
	return k, l.base + rest[:i+1], true
}

// ParseAnyContender splits a contender key of any scope into its scope,
// its lock key and its lock prefix. ok is false for other keys.
func ParseAnyContender(etcdKey string) (scope string, k Key, lockPrefix string, ok bool) {
	rest, found := strings.CutPrefix(etcdKey, Root)
	if !found {
		return "", Key{}, "", false
	}
	scope, _, found = strings.Cut(rest, "/")
	if !found {
		return "", Key{}, "", false
	}
	l, err := NewLayout(scope)
	if err != nil {
		return "", Key{}, "", false
	}
	k, lockPrefix, ok = l.ParseContender(etcdKey)
	return scope, k, lockPrefix, ok
}
