// Package access keeps who may reach the chart's own etcd, for the
// controller: a CA of Baton's own in a Secret, etcd's serving certificate
// issued from it and renewed before expiry, etcd's authentication with one
// user and role per scope (read and write on the scope's locks, read only
// on its policy), and in each namespace whose pods get the sidecar a
// Secret with that namespace's client certificate, which the injector
// mounts. The controller itself authenticates as etcd's root user, the
// only one that reads across scopes.
package access

import (
	"time"

	"github.com/baton-dev/baton/internal/config"
)

// Config says where the certificates are kept.
type Config struct {
	// Namespace holds CASecret and ServerSecret: the controller's.
	Namespace string
	// CASecret keeps the CA (tls.crt, tls.key); made on first start
	// unless ExternalCA.
	CASecret string
	// ExternalCA says that another (cert-manager) makes and renews
	// CASecret: the keeper waits for it and never writes it.
	ExternalCA bool
	// ServerSecret keeps etcd's certificate for clients and peers
	// (tls.crt, tls.key, ca.crt), valid for ServerNames. Empty: another
	// (cert-manager) keeps etcd's certificate.
	ServerSecret string
	// ServerNames are the DNS names (and IP addresses) etcd is reached by;
	// with ServerSecret.
	ServerNames []string
	// ClientSecret names the Secret that each namespace with injected pods
	// gets (tls.crt, tls.key, ca.crt): its sidecars' etcd identity.
	// Default baton-etcd-client.
	ClientSecret string
	// Validity of issued certificates; each is renewed at two thirds of
	// its life. Default 720h (30 days).
	Validity time.Duration
	// Resync is how often the leader looks at every namespace's Secret,
	// making a deleted one again. Default 5m.
	Resync time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{ClientSecret: "baton-etcd-client", Validity: 720 * time.Hour, Resync: 5 * time.Minute}
}

// Validate checks the fields.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "":
		return config.Invalid("access.Namespace", "namespace of the CA and server Secrets: required")
	case c.CASecret == "":
		return config.Invalid("access.CASecret", "CA Secret: required")
	case c.ServerSecret != "" && len(c.ServerNames) == 0:
		return config.Invalid("access.ServerNames", "etcd's server names: give the DNS names its clients and peers use")
	case c.ClientSecret == "":
		return config.Invalid("access.ClientSecret", "client Secret name: required")
	case c.Resync <= 0:
		return config.Invalid("access.Resync", "resync %v: must be positive", c.Resync)
	case c.Validity < 30*time.Second:
		return config.Invalid("access.Validity", "certificate validity %v: at least 30s", c.Validity)
	}
	return nil
}
