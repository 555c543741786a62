package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/pki"
)

// Secure is an etcd as a careful operator runs it: clients over TLS, each
// with a client certificate of the etcd's CA, and etcd's authentication on
// with a root user. A client authenticates as the user its certificate
// names (its common name), or with a user name and password.
type Secure struct {
	*Server
	// CA signs the member's certificate and every client's; CAFile holds
	// its certificate.
	CA     *pki.CA
	CAFile string
	root   *clientv3.Client
}

// RootPassword is the password of the root user of a Secure etcd.
const RootPassword = "root-password"

// StartSecure starts a Secure etcd on a free loopback port. Call Close when
// done.
func StartSecure() (*Secure, error) {
	dir, err := os.MkdirTemp("", "baton-etcd-tls")
	if err != nil {
		return nil, err
	}
	s := &Secure{Server: &Server{Dir: dir}}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Secure) start() error {
	now := time.Now()
	ca, err := pki.NewCA("baton-test-etcd-ca", 24*time.Hour, now)
	if err != nil {
		return err
	}
	s.CA, s.CAFile = ca, filepath.Join(s.Dir, "ca.crt")
	if err := os.WriteFile(s.CAFile, ca.CertPEM, 0o600); err != nil {
		return err
	}
	srv, err := ca.Issue(pki.Request{CommonName: "etcd", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true, Validity: 24 * time.Hour}, now)
	if err != nil {
		return err
	}
	certFile, keyFile, err := s.write("server", srv)
	if err != nil {
		return err
	}
	cfg := embedetcd.Default(filepath.Join(s.Dir, "data"))
	cfg.ClientURL = "https://127.0.0.1:0"
	cfg.UnsafeNoFsync = true
	cfg.TLS = &embedetcd.ServerTLS{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: s.CAFile}
	s.cfg = cfg
	e, err := embedetcd.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	s.e = e
	// The port is fixed from now on, so that Restart finds the member where
	// its clients look for it.
	s.cfg.ClientURL = e.Endpoints()[0]
	if s.root, err = s.Client("root", ""); err != nil {
		return err
	}
	return s.enableAuth()
}

// enableAuth creates the root user and turns authentication on.
func (s *Secure) enableAuth() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.root.UserAdd(ctx, "root", RootPassword); err != nil {
		return fmt.Errorf("add root: %w", err)
	}
	if _, err := s.root.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("grant root: %w", err)
	}
	if _, err := s.root.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable auth: %w", err)
	}
	return nil
}

// Root returns a client authenticated as root.
func (s *Secure) Root() *clientv3.Client { return s.root }

// ClientFiles issues a client certificate for the etcd user user and writes
// it and its key to files in the member's directory.
func (s *Secure) ClientFiles(user string) (certFile, keyFile string, err error) {
	p, err := s.CA.Issue(pki.Request{CommonName: user, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		return "", "", err
	}
	return s.write("client-"+user, p)
}

// Client returns a client with a certificate for user, and with password
// (when not empty) the user name and password as well; opts are its dial
// options.
func (s *Secure) Client(user, password string, opts ...grpc.DialOption) (*clientv3.Client, error) {
	certFile, keyFile, err := s.ClientFiles(user)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: s.CAFile}.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg := clientv3.Config{Endpoints: s.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: opts}
	if password != "" {
		cfg.Username, cfg.Password = user, password
	}
	return clientv3.New(cfg)
}

// AddUser adds user (with password, or none for one that authenticates
// by client certificate) and a role of the same name that grants nothing
// yet.
func (s *Secure) AddUser(ctx context.Context, user, password string) error {
	opts := &clientv3.UserAddOptions{NoPassword: password == ""}
	if _, err := s.root.UserAddWithOptions(ctx, user, password, opts); err != nil {
		return fmt.Errorf("add user %s: %w", user, err)
	}
	if _, err := s.root.RoleAdd(ctx, user); err != nil {
		return fmt.Errorf("add role %s: %w", user, err)
	}
	if _, err := s.root.UserGrantRole(ctx, user, user); err != nil {
		return fmt.Errorf("grant role %s: %w", user, err)
	}
	return nil
}

// GrantScope lets user's role do what a sidecar of scope needs
// (keyspace.Layout.SidecarGrants): its locks, and its policy read only.
func (s *Secure) GrantScope(ctx context.Context, user, scope string) error {
	l, err := keyspace.NewLayout(scope)
	if err != nil {
		return err
	}
	for _, g := range l.SidecarGrants() {
		perm := clientv3.PermissionType(clientv3.PermRead)
		if g.Write {
			perm = clientv3.PermissionType(clientv3.PermReadWrite)
		}
		if _, err := s.root.RoleGrantPermission(ctx, user, g.Key, g.RangeEnd, perm); err != nil {
			return fmt.Errorf("grant %s on %s: %w", user, g.Key, err)
		}
	}
	return nil
}

// Grant lets user's role read and write under prefix.
func (s *Secure) Grant(ctx context.Context, user, prefix string) error {
	if _, err := s.root.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return fmt.Errorf("grant %s on %s: %w", user, prefix, err)
	}
	return nil
}

func (s *Secure) write(name string, p pki.Pair) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(s.Dir, name+".crt"), filepath.Join(s.Dir, name+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, p.KeyPEM, 0o600)
}

// Close stops the member, closes the root client and removes the directory.
func (s *Secure) Close() {
	if s.root != nil {
		s.root.Close()
	}
	s.Server.Close()
}
