package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/pki"
)

// RootUser is etcd's root user: the controller's identity, the only one
// that reads every scope.
const RootUser = "root"

// ClientTLS returns the TLS configuration of an etcd client that trusts
// ca's servers and authenticates as user with a certificate of ca, kept in
// memory and issued anew, at the next handshake, once it is due. A
// certificate expiring under an open connection does not end it.
func ClientTLS(ca *pki.CA, user string, validity time.Duration, now func() time.Time) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	id := &identity{ca: ca, req: clientRequest(user, validity), now: now}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, GetClientCertificate: id.get}
}

// identity is a client certificate that renews itself.
type identity struct {
	ca  *pki.CA
	req pki.Request
	now func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	renewAt time.Time
}

func (id *identity) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	now := id.now()
	if id.cert != nil && now.Before(id.renewAt) {
		return id.cert, nil
	}
	pair, err := id.ca.Issue(id.req, now)
	if err != nil {
		return nil, err
	}
	c, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return nil, err
	}
	id.cert, id.renewAt = &c, pki.RenewAt(c.Leaf)
	return id.cert, nil
}

// RootTLS reads the CA kept in Secret key, which it never makes, and
// returns the TLS configuration of a client that authenticates as etcd's
// root user with certificates of it, issued in memory: for the
// controller's work that runs apart from it (the backups of etcd).
func RootTLS(ctx context.Context, c client.Reader, key client.ObjectKey, validity time.Duration) (*tls.Config, error) {
	var s corev1.Secret
	if err := c.Get(ctx, key, &s); err != nil {
		return nil, fmt.Errorf("read etcd's CA Secret %s: %w", key, err)
	}
	ca, err := pki.ParseCA(s.Data[keyCert], s.Data[keyKey])
	if err != nil {
		return nil, fmt.Errorf("etcd's CA Secret %s: %w", key, err)
	}
	return ClientTLS(ca, RootUser, validity, time.Now), nil
}
