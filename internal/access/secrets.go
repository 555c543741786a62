package access

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/pki"
)

// caValidity is the CA's life: it is not rotated (see docs/security.md).
const caValidity = 10 * 365 * 24 * time.Hour

// LabelManaged marks the Secrets this package writes.
const LabelManaged = "baton.dev/etcd-credentials"

// The keys of a kubernetes.io/tls Secret, and the CA beside them.
const (
	keyCert = corev1.TLSCertKey
	keyKey  = corev1.TLSPrivateKeyKey
	keyCA   = "ca.crt"
)

// LoadCA reads the CA kept in Secret key, making it on first use. Two
// replicas that start together agree: the one whose create fails reads
// the other's.
func LoadCA(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time) (*pki.CA, error) {
	var s corev1.Secret
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		ca, cerr := createCA(ctx, c, key, now)
		if cerr == nil || !apierrors.IsAlreadyExists(cerr) {
			return ca, cerr
		}
		err = c.Get(ctx, key, &s) // another replica made it first
	}
	if err != nil {
		return nil, fmt.Errorf("read the CA Secret %s: %w", key, err)
	}
	ca, err := pki.ParseCA(s.Data[keyCert], s.Data[keyKey])
	if err != nil {
		return nil, fmt.Errorf("the CA Secret %s: %w", key, err)
	}
	return ca, nil
}

// createCA makes a CA and keeps it in Secret key; the error is the API
// server's AlreadyExists when the Secret is there already.
func createCA(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time) (*pki.CA, error) {
	ca, err := pki.NewCA("baton-etcd-ca", caValidity, now)
	if err != nil {
		return nil, err
	}
	s := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{LabelManaged: "ca"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{keyCert: ca.CertPEM, keyKey: ca.KeyPEM},
	}
	if err := c.Create(ctx, &s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		return nil, fmt.Errorf("create the CA Secret %s: %w", key, err)
	}
	return ca, nil
}

// serverRequest is etcd's certificate: it serves clients and peers and
// authenticates to peers.
func serverRequest(names []string, validity time.Duration) pki.Request {
	r := pki.Request{CommonName: "baton-etcd", Server: true, Client: true, Validity: validity}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			r.IPs = append(r.IPs, ip)
		} else {
			r.DNSNames = append(r.DNSNames, n)
		}
	}
	return r
}

// clientRequest is the certificate of etcd user user.
func clientRequest(user string, validity time.Duration) pki.Request {
	return pki.Request{CommonName: user, Client: true, Validity: validity}
}

// KeepCert makes Secret key hold a certificate of ca for r (tls.crt,
// tls.key, ca.crt), issuing a new one when it is missing, was not issued
// by ca, no longer matches r, or is due for renewal. Each of before, when
// a new one is due, runs first and may refuse it (an etcd user to make
// before its certificate). It returns when the certificate is next due.
func KeepCert(ctx context.Context, c client.Client, ca *pki.CA, key client.ObjectKey, r pki.Request, now time.Time, before ...func() error) (time.Time, error) {
	var s corev1.Secret
	err := c.Get(ctx, key, &s)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("read Secret %s: %w", key, err)
	}
	if exists {
		if cert, ok := current(s, ca, r, now); ok {
			return pki.RenewAt(cert), nil
		}
	}
	for _, f := range before {
		if err := f(); err != nil {
			return time.Time{}, err
		}
	}
	pair, err := ca.Issue(r, now)
	if err != nil {
		return time.Time{}, err
	}
	s.Namespace, s.Name, s.Type = key.Namespace, key.Name, corev1.SecretTypeTLS
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[LabelManaged] = "true"
	s.Data = map[string][]byte{keyCert: pair.CertPEM, keyKey: pair.KeyPEM, keyCA: ca.CertPEM}
	if exists {
		err = c.Update(ctx, &s)
	} else {
		err = c.Create(ctx, &s)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("write Secret %s: %w", key, err)
	}
	cert, err := pki.ParseCert(pair.CertPEM)
	if err != nil {
		return time.Time{}, err
	}
	return pki.RenewAt(cert), nil
}

// current returns the Secret's certificate when it can stay: issued by
// ca for r's names and user, and not yet due.
func current(s corev1.Secret, ca *pki.CA, r pki.Request, now time.Time) (*x509.Certificate, bool) {
	if !bytes.Equal(s.Data[keyCA], ca.CertPEM) || len(s.Data[keyKey]) == 0 {
		return nil, false
	}
	cert, err := pki.ParseCert(s.Data[keyCert])
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || !now.Before(pki.RenewAt(cert)) {
		return nil, false
	}
	if cert.Subject.CommonName != r.CommonName || !slices.Equal(cert.DNSNames, r.DNSNames) || !ipsEqual(cert.IPAddresses, r.IPs) {
		return nil, false
	}
	// Issued for longer than asked now (the validity was shortened, after
	// a leak say): replaced at once.
	if pki.Lifetime(cert) > r.Validity+time.Minute {
		return nil, false
	}
	return cert, true
}

func ipsEqual(a, b []net.IP) bool {
	return slices.EqualFunc(a, b, func(x, y net.IP) bool { return x.Equal(y) })
}
