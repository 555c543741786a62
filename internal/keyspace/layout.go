package keyspace

import (
	"fmt"
	"strconv"
	"strings"
)

// Layout builds the etcd keys of one scope, in one of its spaces: its
// locks, or its elections.
type Layout struct {
	scope string
	space Space
	base  string // Root + scope + "/locks/" (or "/elections/")
	delay string // Root + scope + "/delay/" (or "/election-delay/")
}

// Space is a scope's set of lines of one kind: its locks, or its
// elections. A lock and an election of the same name are two lines, each
// with its own keys.
type Space uint8

// The spaces of a scope.
const (
	// Locks are the scope's locks, under /baton/v1/<scope>/locks/: the
	// layout of etcd's concurrency.Mutex.
	Locks Space = iota
	// Elections are the scope's elections, under
	// /baton/v1/<scope>/elections/: the layout of etcd's
	// concurrency.Election, the leader being the candidate created first.
	Elections
)

// String names the space as the API does: "locks" or "elections".
func (s Space) String() string {
	if s == Elections {
		return "elections"
	}
	return "locks"
}

// NewLayout returns the layout of scope's locks; scope must pass
// ValidateScope.
func NewLayout(scope string) (Layout, error) {
	if err := ValidateScope(scope); err != nil {
		return Layout{}, err
	}
	return Layout{scope: scope, base: Root + scope + "/locks/", delay: Root + scope + "/delay/"}, nil
}

// In returns the layout of the same scope's space s.
func (l Layout) In(s Space) Layout {
	l.space = s
	l.base, l.delay = Root+l.scope+"/locks/", Root+l.scope+"/delay/"
	if s == Elections {
		l.base, l.delay = Root+l.scope+"/elections/", Root+l.scope+"/election-delay/"
	}
	return l
}

// Scope returns the scope this layout belongs to.
func (l Layout) Scope() string { return l.scope }

// Space returns the space this layout builds the keys of.
func (l Layout) Space() Space { return l.space }

// Base is the prefix of every contender key of the scope's space.
func (l Layout) Base() string { return l.base }

// Policy is the key of the scope's lock policy: the rules of the
// namespace's LockPolicy objects, which the controller writes and the
// scope's sidecars read (package policy). It is outside Base, so that an
// etcd role may let a sidecar write its scope's locks and only read its
// policy.
func (l Layout) Policy() string { return Root + l.scope + "/policy" }

// Floor is the key of the scope's fence floor: the highest fence known to
// have been granted, in decimal, which a sidecar writes when it finds etcd
// gone back in time (restored from an older snapshot, its data lost) and
// every sidecar of the scope follows: none grants a lock at or below it.
// It is outside Base, so that no lock's prefix holds it.
func (l Layout) Floor() string { return Root + l.scope + "/floor" }

// Once is the key of lock k's run-once record: the outcome of its last
// finished run (Run). It is outside Base, so that no lock's prefix holds
// it.
func (l Layout) Once(k Key) string { return Root + l.scope + "/once/" + Escape(k.s) }

// OncePrefix is the prefix of every run-once record of the scope.
func (l Layout) OncePrefix() string { return Root + l.scope + "/once/" }

// Delay is the key of lock k's lock-delay marker (Delay): written when a
// holder that asked for a lock delay is granted, deleted when it lets go
// cleanly, left behind when it is lost.
func (l Layout) Delay(k Key) string { return l.delay + Escape(k.s) }

// DelayPrefix is the prefix of every lock-delay marker of the scope's
// space.
func (l Layout) DelayPrefix() string { return l.delay }

// DelayContenderKey is the contender key of a session that asks for lock
// k with a lock delay: its ContenderKey with "-d", so that whoever queues
// behind it knows from the name alone that it may leave a marker.
func (l Layout) DelayContenderKey(k Key, lease int64) string {
	return l.ContenderKey(k, lease) + delaySuffix
}

const delaySuffix = "-d"

// IsDelayContender reports whether a contender key is one that asked for
// a lock delay.
func IsDelayContender(key string) bool { return strings.HasSuffix(key, delaySuffix) }

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
	return l.LockPrefix(k) + SessionName(lease)
}

// SessionName is the name of the session whose first lease is lease in its
// contender keys: the lease id in hex.
func SessionName(lease int64) string { return strconv.FormatInt(lease, 16) }

// SessionOf is the name of the session that wrote a contender key
// (ContenderKey, UnitKey, DelayContenderKey): its last segment up to a
// tag or a suffix.
func SessionOf(contenderKey string) string {
	name, _, _ := strings.Cut(contenderKey[strings.LastIndexByte(contenderKey, '/')+1:], "-")
	return name
}

// UnitKey is the contender key of one grant of a shared claim (a reader,
// units of a semaphore) of lock k by the session whose first lease is
// lease: a sidecar may hold a lock several times over, each grant with a
// key and a fence of its own, so the session's name is followed by a tag
// the sidecar picks for the grant. etcdctl lock, which names its key after
// its lease alone, contends with these keys as with any other.
func (l Layout) UnitKey(k Key, lease int64, tag uint32) string {
	return fmt.Sprintf("%s%s-%08x", l.LockPrefix(k), SessionName(lease), tag)
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

// ParseAnyContender splits a contender key of any scope's locks into its
// scope, its lock key and its lock prefix. ok is false for other keys.
func ParseAnyContender(etcdKey string) (scope string, k Key, lockPrefix string, ok bool) {
	return parseAny(etcdKey, Locks)
}

// ParseAnyCandidate splits a candidate key of any scope's elections into
// its scope, its election's name and its prefix. ok is false for other
// keys.
func ParseAnyCandidate(etcdKey string) (scope string, k Key, prefix string, ok bool) {
	return parseAny(etcdKey, Elections)
}

func parseAny(etcdKey string, s Space) (scope string, k Key, prefix string, ok bool) {
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
	k, prefix, ok = l.In(s).ParseContender(etcdKey)
	return scope, k, prefix, ok
}

// Grant is a key range an etcd role gives: [Key, RangeEnd), or the single
// key Key when RangeEnd is empty.
type Grant struct {
	Key, RangeEnd string
	// Write: read and write; else read only.
	Write bool
}

// SidecarGrants are what the etcd role of the scope's sidecars must grant
// when etcd's authentication is on: read and write on the scope's locks,
// elections, run-once records, lock-delay markers and fence floor, read
// only on its policy, nothing else.
func (l Layout) SidecarGrants() []Grant {
	locks, elections := l.In(Locks), l.In(Elections)
	var gs []Grant
	for _, p := range []string{locks.base, elections.base, l.OncePrefix(), locks.delay, elections.delay} {
		gs = append(gs, Grant{Key: p, RangeEnd: prefixEnd(p), Write: true})
	}
	return append(gs, Grant{Key: l.Policy()}, Grant{Key: l.Floor(), Write: true})
}

// prefixEnd is the end of the range of keys that start with p: p with its
// last byte incremented (p ends in "/", so nothing carries).
func prefixEnd(p string) string { return p[:len(p)-1] + string(p[len(p)-1]+1) }
