// Package embedetcd runs a single-member etcd inside the process: Baton's
// default mode on one machine, and the etcd of the tests.
package embedetcd

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/config"
)

// Config configures the embedded etcd.
type Config struct {
	// DataDir holds the member's data; it survives restarts. Required.
	DataDir string
	// ClientURL is where clients connect, e.g. "http://127.0.0.1:2379" or
	// "unix:///tmp/etcd.sock". Default "http://127.0.0.1:2379".
	ClientURL string
	// PeerURL is the raft peer URL. A single member never dials a peer, so
	// the default is a unix socket inside DataDir, which cannot collide with
	// another etcd's port.
	PeerURL string
	// Name of the member. Default "baton".
	Name string
	// StartTimeout bounds the wait for the member to serve. Default 30s.
	StartTimeout time.Duration
	// UnsafeNoFsync skips fsync: tests only, it loses data on a crash.
	UnsafeNoFsync bool
	// Logger receives etcd's own logs. Default: none.
	Logger *zap.Logger
	// TLS, when set, serves clients over TLS; ClientURL's scheme must then
	// be https. Default: none (plain HTTP or a unix socket).
	TLS *ServerTLS
	// History is how long the member keeps its keys' past revisions: once
	// each History, etcd compacts away the revisions older than History
	// (its periodic auto-compaction), so the history spans between one and
	// two Histories at any rate of locking rather than grows until the
	// space quota is full. A watcher that falls further behind is told its
	// revision was compacted and reads the keys again, as the sidecars do.
	// Default 5m.
	History time.Duration
	// Quota is the member's space quota, in bytes: when its database file
	// reaches it, etcd raises its NOSPACE alarm and takes no more writes
	// that add data until room is made (package etcdmaint does it) and the
	// alarm disarmed. Default 2 GiB, etcd's.
	Quota int64
}

// ServerTLS is how the member serves its clients over TLS.
type ServerTLS struct {
	// CertFile and KeyFile are the member's serving certificate and key.
	// etcd reads them again for each handshake, so replacing the files
	// rotates the certificate.
	CertFile, KeyFile string
	// TrustedCAFile, when set, verifies client certificates, and every
	// client must present one (etcd's --client-cert-auth). With etcd's
	// authentication on, a certificate's common name is its user.
	TrustedCAFile string
}

// Default returns the defaults for a data directory.
func Default(dataDir string) Config {
	return Config{
		DataDir:      dataDir,
		ClientURL:    "http://127.0.0.1:2379",
		PeerURL:      "unix://" + peerSocket(dataDir),
		Name:         "baton",
		StartTimeout: 30 * time.Second,
		History:      DefaultHistory,
		Quota:        DefaultQuota,
	}
}

// DefaultQuota is etcd's own default space quota, 2 GiB.
const DefaultQuota = 2 << 30

// DefaultHistory is the history the member keeps by default: long enough
// for any watcher that is not cut off, short enough that a million locks
// an hour (about 500 bytes of history each) keep at most about 85 MB of it.
const DefaultHistory = 5 * time.Minute

// peerSocket places the peer socket in the data directory, or in the
// temporary directory when that path would pass the 107-byte limit of a
// unix socket path.
func peerSocket(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	if p := filepath.Join(abs, "peer.sock"); len(p) < 100 {
		return p
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("baton-peer-%x.sock", fnv64(abs)))
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return config.Invalid("embedetcd.DataDir", "data dir: required for the embedded etcd")
	}
	for _, f := range []struct{ field, name, url string }{{"ClientURL", "client URL", c.ClientURL}, {"PeerURL", "peer URL", c.PeerURL}} {
		if _, err := parseURL(f.url); err != nil {
			return config.Invalid("embedetcd."+f.field, "%s: %w", f.name, err)
		}
	}
	if c.TLS != nil {
		if u, _ := parseURL(c.ClientURL); u.Scheme != "https" {
			return config.Invalid("embedetcd.ClientURL", "client URL %q: TLS serves https, not %s", c.ClientURL, u.Scheme)
		}
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			return config.Invalid("embedetcd.TLS", "TLS: a certificate and its key are both required")
		}
	}
	if c.StartTimeout <= 0 {
		return config.Invalid("embedetcd.StartTimeout", "start timeout: must be positive, got %v", c.StartTimeout)
	}
	if c.History < time.Second {
		return config.Invalid("embedetcd.History", "history %v: must be at least 1s; etcd keeps every revision of a key for this long, and without a bound its database fills up", c.History)
	}
	if c.Quota < 1<<20 {
		return config.Invalid("embedetcd.Quota", "quota %d bytes: must be at least 1 MiB; an empty etcd database file is already about 20 KiB, and the quota counts the file", c.Quota)
	}
	return nil
}

// Etcd is a running embedded member.
type Etcd struct {
	e         *embed.Etcd
	endpoints []string
}

// Start starts a member and waits until it serves clients.
func Start(ctx context.Context, c Config) (*Etcd, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd data dir: %w", err)
	}
	cu, _ := parseURL(c.ClientURL)
	pu, _ := parseURL(c.PeerURL)
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	if cfg.Name == "" {
		cfg.Name = "baton"
	}
	cfg.Dir = c.DataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = c.History.String()
	cfg.QuotaBackendBytes = c.Quota
	if c.TLS != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile,
			TrustedCAFile: c.TLS.TrustedCAFile, ClientCertAuth: c.TLS.TrustedCAFile != ""}
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.ClientTLSInfo.Logger = lg
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", c.DataDir, err)
	}
	t := time.NewTimer(c.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after %v", c.StartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", ctx.Err())
	}
	eps := make([]string, 0, len(e.Clients))
	for _, l := range e.Clients {
		if cu.Scheme == "unix" {
			eps = append(eps, "unix://"+l.Addr().String())
		} else {
			eps = append(eps, cu.Scheme+"://"+l.Addr().String())
		}
	}
	return &Etcd{e: e, endpoints: eps}, nil
}

// Endpoints returns the client URLs, with the real port when the
// configured one was 0.
func (e *Etcd) Endpoints() []string { return e.endpoints }

// Close stops the member and waits for it to exit.
func (e *Etcd) Close() { e.e.Close() }

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "http", "https", "unix":
	default:
		return nil, fmt.Errorf("%q: scheme must be http, https or unix", s)
	}
	if u.Host == "" && u.Path == "" {
		return nil, fmt.Errorf("%q: no address", s)
	}
	return u, nil
}
