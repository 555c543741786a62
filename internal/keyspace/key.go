// Package keyspace is the etcd key layout of Baton's locks and the holder
// record stored in each contender key. It is a public contract: the mirror
// controller, etcdctl and other sidecars read the same keys.
//
// A lock key such as "tenant-a/billing" lives under
//
//	/baton/v1/<scope>/locks/<escaped key>/<lease id in hex>
//
// where the escaped key replaces "/" by "%2F". Because "%" and "/" never occur
// in a key segment, escaping is injective, and because every lock prefix ends
// with "/", no lock's prefix contains another lock's contenders: "x" and "x/y"
// are independent locks.
package keyspace

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Root is the prefix of every key Baton writes in etcd.
const Root = "/baton/v1/"

// Limits of a lock key.
const (
	MaxSegments   = 8
	MaxSegmentLen = 128
	// MaxScopeLen bounds a scope, which is a Kubernetes namespace by default.
	MaxScopeLen = 63
)

// ErrInvalidKey is wrapped by every key or scope validation error.
var ErrInvalidKey = errors.New("invalid key")

// Key is a validated lock key: 1 to MaxSegments segments joined by "/".
type Key struct{ s string }

// ParseKey validates s as a lock key.
func ParseKey(s string) (Key, error) {
	if s == "" {
		return Key{}, fmt.Errorf("%w: the key is empty; use 1 to %d segments of [A-Za-z0-9._-] joined by '/'", ErrInvalidKey, MaxSegments)
	}
	if n := strings.Count(s, "/") + 1; n > MaxSegments {
		return Key{}, fmt.Errorf("%w: %q has %d segments, at most %d are allowed", ErrInvalidKey, truncate(s), n, MaxSegments)
	}
	i := 0
	for seg := range strings.SplitSeq(s, "/") { // no slice: every request parses its key
		i++
		if err := checkSegment(seg); err != nil {
			return Key{}, fmt.Errorf("%w: segment %d of %q %w", ErrInvalidKey, i, truncate(s), err)
		}
	}
	return Key{s: s}, nil
}

// String returns the key as the user wrote it.
func (k Key) String() string { return k.s }

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k.s == "" }

// Escape maps a key (or a prefix of one) to its form inside an etcd key:
// every "/" becomes "%2F". It is applied character by character, so a string
// prefix of a key escapes to a string prefix of the escaped key.
func Escape(s string) string { return strings.ReplaceAll(s, "/", "%2F") }

// Unescape inverts Escape.
func Unescape(s string) string { return strings.ReplaceAll(s, "%2F", "/") }

// ValidatePrefix checks a list prefix: any string prefix of a valid key,
// including "" (everything) and a prefix that ends in "/".
func ValidatePrefix(p string) error {
	if len(p) > MaxSegments*(MaxSegmentLen+1) {
		return fmt.Errorf("%w: prefix is %d bytes long, longer than any key", ErrInvalidKey, len(p))
	}
	for i, r := range p {
		if r != '/' && !segmentRune(r) {
			return fmt.Errorf("%w: prefix %q has %s at byte %d; only [A-Za-z0-9._-] and '/' are allowed", ErrInvalidKey, truncate(p), describeRune(r), i)
		}
	}
	return nil
}

// ValidateScope checks a scope: one segment of [A-Za-z0-9._-], at most
// MaxScopeLen bytes (a Kubernetes namespace fits).
func ValidateScope(scope string) error {
	if len(scope) > MaxScopeLen {
		return fmt.Errorf("%w: scope %q is longer than %d bytes", ErrInvalidKey, truncate(scope), MaxScopeLen)
	}
	if err := checkSegment(scope); err != nil {
		return fmt.Errorf("%w: scope %q %w", ErrInvalidKey, truncate(scope), err)
	}
	return nil
}

func checkSegment(seg string) error {
	switch {
	case seg == "":
		return errors.New("is empty (no leading, trailing or double '/')")
	case seg == "." || seg == "..":
		return fmt.Errorf("is %q, which is not allowed", seg)
	case len(seg) > MaxSegmentLen:
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(seg), MaxSegmentLen)
	}
	for i, r := range seg {
		if !segmentRune(r) {
			return fmt.Errorf("has %s at byte %d; only [A-Za-z0-9._-] are allowed", describeRune(r), i)
		}
	}
	return nil
}

func segmentRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// describeRune names a character as a person reads it: 'é' (U+00E9), or
// the byte of a string that is not UTF-8.
func describeRune(r rune) string {
	if r == utf8.RuneError {
		return "a byte that is not UTF-8"
	}
	return fmt.Sprintf("%q (%U)", r, r)
}

// truncate keeps error messages short when the input is huge.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
