package kubenode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-dev/baton/internal/pki"
)

// certLife is how long the node's CA and certificates last: the node is a
// test's, gone long before.
const certLife = 10 * 365 * 24 * time.Hour

// nodeCerts is the node's certificate authority and the certificates
// issued by it, written as PEM files in dir.
type nodeCerts struct {
	dir string
	ca  *pki.CA
}

// newPKI makes a CA in dir (ca.crt, ca.key).
func newPKI(dir string) (*nodeCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("baton-node-ca", certLife, time.Now())
	if err != nil {
		return nil, err
	}
	p := &nodeCerts{dir: dir, ca: ca}
	return p, p.write("ca", pki.Pair{CertPEM: ca.CertPEM, KeyPEM: ca.KeyPEM})
}

// caFile is the CA's certificate file.
func (p *nodeCerts) caFile() string { return filepath.Join(p.dir, "ca.crt") }

// issue writes name.crt and name.key: a client certificate for cn in the
// groups orgs, serving too (with hosts as its names) when server is set.
func (p *nodeCerts) issue(name, cn string, orgs []string, hosts []string, server bool) (certFile, keyFile string, err error) {
	r := pki.Request{CommonName: cn, Organization: orgs, Client: true, Server: server, Validity: certLife}
	if server {
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				r.IPs = append(r.IPs, ip)
			} else {
				r.DNSNames = append(r.DNSNames, h)
			}
		}
	}
	pair, err := p.ca.Issue(r, time.Now())
	if err != nil {
		return "", "", err
	}
	if err := p.write(name, pair); err != nil {
		return "", "", err
	}
	return filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key"), nil
}

// keyPair writes name.key and name.pub: the service accounts' signing key.
func (p *nodeCerts) keyPair(name string) (priv, pub string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	priv, pub = filepath.Join(p.dir, name+".key"), filepath.Join(p.dir, name+".pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	return priv, pub, os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

func (p *nodeCerts) write(name string, pair pki.Pair) error {
	if err := os.WriteFile(filepath.Join(p.dir, name+".crt"), pair.CertPEM, 0o644); err != nil {
		return fmt.Errorf("write %s.crt: %w", name, err)
	}
	return os.WriteFile(filepath.Join(p.dir, name+".key"), pair.KeyPEM, 0o600)
}
