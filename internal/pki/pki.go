// Package pki issues the certificates etcd, the sidecars and the
// controller present to each other: a certificate authority of Baton's
// own, serving and client certificates signed by it, and when each is due
// for renewal. Keys are ECDSA P-256; everything is PEM, as etcd reads it.
//
// A client certificate's common name is the etcd user it authenticates as:
// with client certificate authentication on, etcd takes the common name as
// the user of a request that carries no password token.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/baton-dev/baton/internal/config"
)

// backdate is how far before "now" a certificate becomes valid, so that a
// peer whose clock is a little behind accepts it at once.
const backdate = 5 * time.Minute

// CA is a certificate authority: its certificate and the key that signs.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
	// CertPEM and KeyPEM are the certificate and key as stored (a Secret's
	// ca.crt and ca.key).
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named commonName, valid from now for
// validity.
func NewCA(commonName string, validity time.Duration, now time.Time) (*CA, error) {
	if commonName == "" {
		return nil, config.Invalid("pki.CommonName", "CA common name: required")
	}
	if validity <= 0 {
		return nil, config.Invalid("pki.Validity", "CA validity %v: must be positive", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// ParseCA reads a CA back from its certificate and key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %q is not a CA", cert.Subject.CommonName)
	}
	signer, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, key: signer, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// parseKey reads a private key in any of the PEM forms a CA's Secret may
// hold: PKCS #8 (Baton's), SEC 1 EC or PKCS #1 RSA (cert-manager's
// default encoding).
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	var k any
	var err error
	switch b.Type {
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%T cannot sign", k)
	}
	return signer, nil
}

// Request describes a certificate to issue.
type Request struct {
	// CommonName names the holder; for a client of etcd, its etcd user.
	CommonName string
	// Organization is the subject's organizations: for a client of
	// Kubernetes, its groups (system:masters, system:nodes).
	Organization []string
	// DNSNames and IPs are the names a server answers to.
	DNSNames []string
	IPs      []net.IP
	// Server and Client say what the certificate is for: serving TLS,
	// authenticating as a client, or both (an etcd member does both).
	Server, Client bool
	// Validity is how long the certificate is valid from its issue.
	Validity time.Duration
}

// Validate reports the first invalid field.
func (r Request) Validate() error {
	switch {
	case r.CommonName == "":
		return config.Invalid("pki.CommonName", "certificate common name: required")
	case !r.Server && !r.Client:
		return config.Invalid("pki.Usage", "certificate %q: say whether it serves, authenticates a client, or both", r.CommonName)
	case r.Server && len(r.DNSNames) == 0 && len(r.IPs) == 0:
		return config.Invalid("pki.DNSNames", "serving certificate %q: give the DNS names or IPs it answers to", r.CommonName)
	case r.Validity <= 0:
		return config.Invalid("pki.Validity", "certificate %q validity %v: must be positive", r.CommonName, r.Validity)
	}
	return nil
}

// Pair is an issued certificate and its key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a new certificate for r, valid from now. It never outlives
// the CA.
func (ca *CA) Issue(r Request, now time.Time) (Pair, error) {
	if err := r.Validate(); err != nil {
		return Pair{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("key for %q: %w", r.CommonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.CommonName, Organization: r.Organization},
		DNSNames:     r.DNSNames,
		IPAddresses:  r.IPs,
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(r.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	if r.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if r.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("certificate for %q: %w", r.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// ParseCert reads the first certificate of certPEM.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}

// RenewAt is when a certificate is due to be replaced: two thirds into
// its lifetime from its issue, so that a replacement has a third of it to
// reach every reader before the old one expires.
func RenewAt(cert *x509.Certificate) time.Time {
	return cert.NotAfter.Add(-Lifetime(cert) / 3)
}

// Lifetime is how long a certificate is valid from its issue. A
// certificate of Baton's is issued backdate after its NotBefore (see
// Issue), so that a short one is not due at once.
func Lifetime(cert *x509.Certificate) time.Duration {
	life := cert.NotAfter.Sub(cert.NotBefore)
	if life > backdate {
		life -= backdate
	}
	return life
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return s, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
