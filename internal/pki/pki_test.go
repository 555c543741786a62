package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/config"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, 365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, r Request) Pair {
	t.Helper()
	p, err := ca.Issue(r, now)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIssuedCertificatesVerify: a serving and a client certificate chain
// to their CA with the usages asked for, and not to another CA.
func TestIssuedCertificatesVerify(t *testing.T) {
	ca, other := newCA(t, "baton-ca"), newCA(t, "other-ca")
	srv := issue(t, ca, Request{CommonName: "etcd", DNSNames: []string{"etcd.baton.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true, Validity: 24 * time.Hour})
	cli := issue(t, ca, Request{CommonName: "team-a", Organization: []string{"system:masters"}, Client: true, Validity: 24 * time.Hour})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)

	sc, err := ParseCert(srv.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Verify(x509.VerifyOptions{Roots: roots, DNSName: "etcd.baton.svc", CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	if _, err := sc.Verify(x509.VerifyOptions{Roots: roots, DNSName: "elsewhere.example", CurrentTime: now}); err == nil {
		t.Error("serving certificate verified for a name it does not carry")
	}
	cc, err := ParseCert(cli.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Subject.CommonName != "team-a" || len(cc.Subject.Organization) != 1 || cc.Subject.Organization[0] != "system:masters" {
		t.Errorf("client subject %v, want the user team-a in the group system:masters", cc.Subject)
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client-only certificate verified for serving")
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: otherRoots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a certificate verified against a CA that did not sign it")
	}
}

// TestMutualTLS: a server that requires client certificates of its CA
// accepts one and refuses a client with a certificate of another CA.
func TestMutualTLS(t *testing.T) {
	// Real handshakes check validity on the real clock.
	now := time.Now()
	ca, err := NewCA("baton-ca", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other-ca", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *CA, r Request) Pair {
		p, err := ca.Issue(r, now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv := issue(ca, Request{CommonName: "etcd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Validity: time.Hour})
	good := issue(ca, Request{CommonName: "team-a", Client: true, Validity: time.Hour})
	bad := issue(other, Request{CommonName: "team-a", Client: true, Validity: time.Hour})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	srvCert, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peers := make(chan string, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				peers <- "refused"
			} else {
				peers <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			c.Close()
		}
	}()
	dial := func(p Pair) error {
		cert, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the server's verdict on the client comes after the client's handshake
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if err := dial(good); err != nil {
		t.Errorf("client of the CA: %v", err)
	}
	if got := <-peers; got != "team-a" {
		t.Errorf("server saw %q, want team-a", got)
	}
	if err := dial(bad); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if got := <-peers; got != "refused" {
		t.Errorf("server saw %q for a certificate of another CA, want it refused", got)
	}
}

// TestLifetimes: a certificate never outlives its CA, and its renewal
// falls two thirds into its life.
func TestLifetimes(t *testing.T) {
	ca, err := NewCA("short-ca", 10*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	p := issue(t, ca, Request{CommonName: "team-a", Client: true, Validity: 100 * time.Hour})
	c, err := ParseCert(p.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("certificate ends %v, after its CA's %v", c.NotAfter, ca.Cert.NotAfter)
	}
	p = issue(t, ca, Request{CommonName: "team-a", Client: true, Validity: 3 * time.Hour})
	if c, err = ParseCert(p.CertPEM); err != nil {
		t.Fatal(err)
	}
	issued := c.NotBefore.Add(backdate)
	if got, want := RenewAt(c), issued.Add(c.NotAfter.Sub(issued)*2/3); !got.Equal(want) {
		t.Errorf("renew at %v, want %v", got, want)
	}
	if !RenewAt(c).Before(c.NotAfter) || !RenewAt(c).After(now) {
		t.Errorf("renew at %v: not between now %v and the end %v", RenewAt(c), now, c.NotAfter)
	}
	// A certificate shorter than the backdate is not due at once.
	p = issue(t, ca, Request{CommonName: "team-a", Client: true, Validity: 30 * time.Second})
	if c, err = ParseCert(p.CertPEM); err != nil {
		t.Fatal(err)
	}
	if got := RenewAt(c).Sub(now); got < 19*time.Second || got > 21*time.Second {
		t.Errorf("a 30s certificate is due %v after its issue, want 20s", got)
	}
}

// TestParseCA reads a stored CA back and refuses a key of another.
func TestParseCA(t *testing.T) {
	ca, other := newCA(t, "baton-ca"), newCA(t, "other-ca")
	back, err := ParseCA(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := issue(t, back, Request{CommonName: "team-a", Client: true, Validity: time.Hour})
	c, _ := ParseCert(p.CertPEM)
	if err := c.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("issued by the CA read back: %v", err)
	}
	if _, err := ParseCA(ca.CertPEM, other.KeyPEM); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("another CA's key: %v, want a mismatch", err)
	}
	if _, err := ParseCA(p.CertPEM, p.KeyPEM); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("a leaf as CA: %v, want refused", err)
	}
	if _, err := ParseCA([]byte("junk"), ca.KeyPEM); err == nil {
		t.Error("junk certificate accepted")
	}
	// cert-manager's default encoding of an ECDSA key: SEC 1.
	b, _ := pem.Decode(ca.KeyPEM)
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(ca.CertPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		t.Errorf("an EC PRIVATE KEY: %v", err)
	}
}

// TestBadRequests name their field.
func TestBadRequests(t *testing.T) {
	ca := newCA(t, "baton-ca")
	for _, tc := range []struct {
		r     Request
		field string
	}{
		{Request{Client: true, Validity: time.Hour}, "pki.CommonName"},
		{Request{CommonName: "x", Validity: time.Hour}, "pki.Usage"},
		{Request{CommonName: "x", Server: true, Validity: time.Hour}, "pki.DNSNames"},
		{Request{CommonName: "x", Client: true}, "pki.Validity"},
	} {
		_, err := ca.Issue(tc.r, now)
		var fe *config.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error on %s", tc.r, err, tc.field)
		}
	}
	if _, err := NewCA("", time.Hour, now); err == nil {
		t.Error("a CA without a name")
	}
}
