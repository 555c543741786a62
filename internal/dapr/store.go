// Package dapr speaks Dapr's distributed lock API (v1.0-alpha1) over HTTP
// and gRPC, as daprd serves it, on top of Baton's lock coordinator: an app
// written against Dapr's lock building block and its SDKs points at Baton
// and gets etcd-backed locks without a code change. A Dapr lock is a Baton
// lock: its key is the store's key prefix, Dapr's key scoping (the app id
// by default) and the resource id; its owner is the lock owner; its ttl is
// expiryInSeconds.
//
// Only the lock API is served (TryLockAlpha1, UnlockAlpha1), with what the
// SDKs call before their first request (health and metadata); every other
// Dapr API answers that Baton serves only locks.
package dapr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Dapr's key scoping strategies (a lock component's keyPrefix metadata):
// which segment goes between the store's prefix and the resource id.
const (
	// KeyPrefixAppID puts the app id (Dapr's default): two apps with the
	// same resource id do not contend.
	KeyPrefixAppID = "appid"
	// KeyPrefixName puts the store's name: every app using the store
	// contends.
	KeyPrefixName = "name"
	// KeyPrefixNone puts nothing: every app, through any store with the
	// same prefix, contends.
	KeyPrefixNone = "none"
)

// DefaultStoreName is the store that exists when none is configured: the
// name Dapr's documentation uses.
const DefaultStoreName = "lockstore"

// DefaultPrefix is a store's key prefix when none is given.
const DefaultPrefix = "dapr"

// Store is one Dapr lock store: its name in Dapr's API and where its locks
// live among the sidecar's keys.
type Store struct {
	// Name is the storeName of Dapr's API (a component's metadata.name).
	Name string
	// Prefix is the key prefix of the store's locks: one or more key
	// segments. Default DefaultPrefix.
	Prefix string
	// KeyPrefix is Dapr's key scoping: KeyPrefixAppID (the default),
	// KeyPrefixName, KeyPrefixNone, or any other string, which is then put
	// as it is (a prefix shared by the apps that name it).
	KeyPrefix string
}

// DefaultStores is the configuration with no store given: DefaultStoreName
// under DefaultPrefix, scoped by app id.
func DefaultStores() []Store {
	return []Store{{Name: DefaultStoreName, Prefix: DefaultPrefix, KeyPrefix: KeyPrefixAppID}}
}

// ParseStore reads a store from its flag form:
// name=NAME[,prefix=PREFIX][,keyPrefix=appid|name|none|CUSTOM]. A bare
// NAME is name=NAME.
func ParseStore(s string) (Store, error) {
	st := Store{Prefix: DefaultPrefix, KeyPrefix: KeyPrefixAppID}
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok && i == 0 {
			k, v, ok = "name", part, true
		}
		if !ok {
			return Store{}, fmt.Errorf("%q: %q is not key=value; write name=NAME,prefix=PREFIX,keyPrefix=STRATEGY", s, part)
		}
		k = strings.TrimSpace(k)
		if seen[strings.ToLower(k)] {
			return Store{}, fmt.Errorf("%q: %s is given twice", s, k)
		}
		seen[strings.ToLower(k)] = true
		switch strings.ToLower(k) {
		case "name":
			st.Name = v
		case "prefix":
			st.Prefix = v
		case "keyprefix":
			st.KeyPrefix = v
			if l := strings.ToLower(v); l == KeyPrefixAppID || l == KeyPrefixName || l == KeyPrefixNone {
				st.KeyPrefix = l // Dapr reads the strategies case-blind
			}
		default:
			return Store{}, fmt.Errorf("%q: unknown field %q; a store has name, prefix and keyPrefix", s, k)
		}
	}
	if !seen["name"] {
		return Store{}, fmt.Errorf("%q: no name; write name=NAME", s)
	}
	if err := st.Validate(); err != nil {
		return Store{}, fmt.Errorf("%q: %w", s, err)
	}
	return st, nil
}

// String is the store's flag form.
func (s Store) String() string {
	return "name=" + s.Name + ",prefix=" + s.Prefix + ",keyPrefix=" + s.KeyPrefix
}

// Validate checks the store's fields.
func (s Store) Validate() error {
	switch {
	case s.Name == "":
		return errors.New("a store's name is empty")
	case len(s.Name) > 256:
		return fmt.Errorf("store name %.40q...: longer than 256 bytes", s.Name)
	case strings.ContainsAny(s.Name, "/?#% \t\n"):
		return fmt.Errorf("store name %q: it is a path segment of Dapr's API, so it may not hold '/', '?', '#', '%%' or spaces", s.Name)
	case s.KeyPrefix == "":
		return fmt.Errorf("store %q: keyPrefix is empty; use appid, name, none or a prefix of your own", s.Name)
	case strings.Contains(s.KeyPrefix, separator):
		return fmt.Errorf("store %q: keyPrefix %q may not contain %q (Dapr refuses it too)", s.Name, s.KeyPrefix, separator)
	}
	k, err := keyspace.ParseKey(s.Prefix)
	if err != nil {
		return fmt.Errorf("store %q: prefix: %w", s.Name, err)
	}
	// The key scoping segment and the resource id follow the prefix.
	if n := strings.Count(k.String(), "/") + 1; n > keyspace.MaxSegments-2 {
		return fmt.Errorf("store %q: prefix %q has %d segments; at most %d leave room for the app id and the resource id", s.Name, s.Prefix, n, keyspace.MaxSegments-2)
	}
	if _, err := s.scopeSegment(""); err != nil {
		return fmt.Errorf("store %q: keyPrefix: %w", s.Name, err)
	}
	return nil
}

// separator is what Dapr forbids in a resource id and a keyPrefix (its
// own key separator).
const separator = "||"

// Key is the Baton key of resource in s, for an app: the store's prefix,
// then Dapr's key scoping, then the resource id, each escaped into one key
// segment (see segment).
func (s Store) Key(appID, resource string) (keyspace.Key, error) {
	if strings.Contains(resource, separator) {
		return keyspace.Key{}, fmt.Errorf("input key/keyPrefix '%s' can't contain '%s'", resource, separator)
	}
	scope, err := s.scopeSegment(appID)
	if err != nil {
		return keyspace.Key{}, err
	}
	res, err := segment("resourceId", resource)
	if err != nil {
		return keyspace.Key{}, err
	}
	k := s.Prefix + "/"
	if scope != "" {
		k += scope + "/"
	}
	return keyspace.ParseKey(k + res)
}

// scopeSegment is the key segment Dapr's key scoping puts before the
// resource id, "" for none.
func (s Store) scopeSegment(appID string) (string, error) {
	switch s.KeyPrefix {
	case KeyPrefixNone:
		return "", nil
	case KeyPrefixName:
		return segment("store name", s.Name)
	case KeyPrefixAppID:
		if appID == "" { // as Dapr: no app id, no scoping
			return "", nil
		}
		return segment("app id", appID)
	}
	return segment("keyPrefix", s.KeyPrefix)
}

// segment escapes any string into one key segment, injectively: the bytes
// [A-Za-z0-9.-] stay as they are, every other byte ('_' included) becomes
// '_' and its two hex digits, and a dot of "." or ".." becomes "_2E". So
// "order:42" is "order_3A42" and "a/b" is "a_2Fb".
func segment(what, s string) (string, error) {
	if s == "." || s == ".." {
		return strings.Repeat("_2E", len(s)), nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02X", c)
	}
	if b.Len() > keyspace.MaxSegmentLen {
		return "", fmt.Errorf("%s is %d bytes once escaped into a Baton key segment (every byte but [A-Za-z0-9.-] takes 3); at most %d fit", what, b.Len(), keyspace.MaxSegmentLen)
	}
	return b.String(), nil
}

// Config configures the Dapr API of a sidecar.
type Config struct {
	// Stores are the lock stores served. Default DefaultStores().
	Stores []Store
	// AppID is the app's Dapr app id, the key scoping of stores with
	// keyPrefix appid. Default "": no scoping, as daprd without an app id.
	AppID string
}

// Default returns the documented defaults.
func Default() Config { return Config{Stores: DefaultStores()} }

// Validate checks every store and that no two share a name.
func (c Config) Validate() error {
	if len(c.Stores) == 0 {
		return config.Invalid("dapr.Stores", "no lock store: give at least one")
	}
	names := map[string]bool{}
	for _, s := range c.Stores {
		if err := s.Validate(); err != nil {
			return config.Invalid("dapr.Stores", "%w", err)
		}
		if names[s.Name] {
			return config.Invalid("dapr.Stores", "store %q is given twice", s.Name)
		}
		names[s.Name] = true
	}
	if strings.Contains(c.AppID, separator) {
		return config.Invalid("dapr.AppID", "app id %q may not contain %q", c.AppID, separator)
	}
	if _, err := segment("app id", c.AppID); err != nil {
		return config.Invalid("dapr.AppID", "%w", err)
	}
	return nil
}
