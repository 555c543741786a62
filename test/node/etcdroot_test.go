package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/pki"
)

// rootCert issues a certificate of etcd's root user from the chart's
// etcd's CA, as any administrator of the release's namespace can, and
// returns it, its key and the CA's certificate.
func rootCert(t *testing.T) (certPEM, keyPEM, caPEM []byte) {
	t.Helper()
	ca, err := node.Client.CoreV1().Secrets(system).Get(context.Background(), release+"-etcd-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's etcd's CA: %v", err)
	}
	c, err := pki.ParseCA(ca.Data["tls.crt"], ca.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pair, err := c.Issue(pki.Request{CommonName: "root", Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pair.CertPEM, pair.KeyPEM, ca.Data["tls.crt"]
}

// rootClient is a client of the chart's etcd as its root user, from this
// host through etcd's Service (kube-proxy carries it), with a certificate
// issued from etcd's CA.
func rootClient(t *testing.T) *clientv3.Client {
	t.Helper()
	certPEM, keyPEM, caPEM := rootCert(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	// The names etcd's certificate holds, dialled at their addresses:
	// this host resolves no cluster names.
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ip, err := clusterAddress(ctx, host)
		if err != nil {
			return nil, err
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(ip, port))
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"https://" + release + "-etcd." + system + ".svc:2379"},
		DialTimeout: 5 * time.Second,
		TLS:         &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// clusterAddress is the address of etcd's Service or of one of its
// members, by the name the cluster's DNS gives it.
func clusterAddress(ctx context.Context, host string) (string, error) {
	if host == release+"-etcd."+system+".svc" {
		svc, err := node.Client.CoreV1().Services(system).Get(ctx, release+"-etcd", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return svc.Spec.ClusterIP, nil
	}
	pod, rest, _ := strings.Cut(host, ".")
	if rest != release+"-etcd-peers."+system+".svc" {
		return "", fmt.Errorf("%s: not a name of the chart's etcd", host)
	}
	p, err := node.Client.CoreV1().Pods(system).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if p.Status.PodIP == "" {
		return "", fmt.Errorf("etcd member %s has no address yet", pod)
	}
	return p.Status.PodIP, nil
}

// memberStatuses are the statuses of every member of etcd, by name.
func memberStatuses(t *testing.T, cli *clientv3.Client) map[string]*clientv3.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("etcd's members: %v", err)
	}
	out := map[string]*clientv3.StatusResponse{}
	for _, m := range members.Members {
		if len(m.ClientURLs) == 0 {
			continue
		}
		st, err := cli.Status(ctx, m.ClientURLs[0])
		if err != nil {
			t.Fatalf("etcd member %s's status: %v", m.Name, err)
		}
		out[m.Name] = st
	}
	return out
}

// endpointStatus is the status of the member etcd's Service led cli to.
func endpointStatus(t *testing.T, cli *clientv3.Client) *clientv3.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		t.Fatalf("etcd's status: %v", err)
	}
	return st
}

// hasAlarm reports whether etcd lists its NOSPACE alarm.
func hasAlarm(t *testing.T, cli *clientv3.Client) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatalf("etcd's alarms: %v", err)
	}
	for _, a := range resp.Alarms {
		if a.Alarm.String() == "NOSPACE" {
			return true
		}
	}
	return false
}

// lockFences are the create revisions of the keys of the app's lock key:
// its holders and waiters.
func lockFences(t *testing.T, cli *clientv3.Client, key string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	layout, err := keyspace.NewLayout(appNS)
	if err != nil {
		t.Fatal(err)
	}
	k, err := keyspace.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, layout.LockPrefix(k), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var fences []int64
	for _, kv := range resp.Kvs {
		fences = append(fences, kv.CreateRevision)
	}
	return fences
}
