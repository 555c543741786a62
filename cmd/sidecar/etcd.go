package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/pki"
)

// etcdOptions says how to reach an external etcd cluster.
type etcdOptions struct {
	endpoints          []string
	caCert, cert, key  string
	username, password string
	dialTimeout        time.Duration
	tls                *tls.Config // made by the controller (--etcd-ca-secret); replaces the files
}

// addFlags registers the --etcd-* flags; endpointsHelp describes
// --etcd-endpoints for the command at hand.
func (e *etcdOptions) addFlags(fs *pflag.FlagSet, endpointsHelp string) {
	fs.StringSliceVar(&e.endpoints, "etcd-endpoints", nil, endpointsHelp)
	fs.StringVar(&e.caCert, "etcd-cacert", "", "CA bundle to verify etcd's certificate")
	fs.StringVar(&e.cert, "etcd-cert", "", "client certificate for etcd (with --etcd-key)")
	fs.StringVar(&e.key, "etcd-key", "", "client key for etcd (with --etcd-cert)")
	fs.StringVar(&e.username, "etcd-username", "", "etcd user; the password comes from BATON_ETCD_PASSWORD")
	fs.DurationVar(&e.dialTimeout, "etcd-dial-timeout", e.dialTimeout, "bound of the first connection to etcd")
}

func (e *etcdOptions) validate() error {
	for _, ep := range e.endpoints {
		if !strings.Contains(ep, "://") {
			return fmt.Errorf("--etcd-endpoints %q: want a URL such as https://etcd-0.etcd:2379", ep)
		}
	}
	if (e.cert == "") != (e.key == "") {
		return errors.New("--etcd-cert and --etcd-key: give both or neither")
	}
	for _, f := range []struct{ flag, path string }{{"--etcd-cacert", e.caCert}, {"--etcd-cert", e.cert}, {"--etcd-key", e.key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	if e.username == "" && e.password != "" {
		return errors.New("BATON_ETCD_PASSWORD is set but --etcd-username is not")
	}
	if e.dialTimeout <= 0 {
		return fmt.Errorf("--etcd-dial-timeout %v: must be positive", e.dialTimeout)
	}
	return nil
}

// user names the etcd user the client authenticates as, for errors: the
// user name, or the client certificate's common name (etcd's user for a
// request without a password when it verifies client certificates), or ""
// without either.
func (e *etcdOptions) user() string {
	if e.username != "" {
		return e.username
	}
	if e.cert == "" {
		return ""
	}
	b, err := os.ReadFile(e.cert)
	if err != nil {
		return ""
	}
	if c, err := pki.ParseCert(b); err == nil {
		return c.Subject.CommonName
	}
	return ""
}

// client returns an etcd client for endpoints with the TLS and auth options.
func (e *etcdOptions) client(endpoints []string, log *zap.Logger, dial ...grpc.DialOption) (*clientv3.Client, error) {
	// gRPC's default reconnect back-off grows to two minutes: after an etcd
	// outage of a few seconds the client would come back seconds after
	// etcd did, and every session and waiter with it. Keep trying each
	// second at most.
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 5 * time.Second,
	})}, etcdstore.DialOptions()...)
	dial = append(opts, dial...)
	cfg := clientv3.Config{
		DialOptions:          dial,
		Endpoints:            endpoints,
		DialTimeout:          e.dialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Username:             e.username,
		Password:             e.password,
		Logger:               log,
	}
	cfg.TLS = e.tls
	if e.caCert != "" || e.cert != "" {
		tlsInfo := transport.TLSInfo{CertFile: e.cert, KeyFile: e.key, TrustedCAFile: e.caCert}
		tlsCfg, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}
