package kubenode

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// startControlPlane starts etcd, the API server, the controller manager,
// the scheduler and kube-proxy, and writes their certificates and
// kubeconfigs.
func (n *Node) startControlPlane(ctx context.Context) error {
	p, err := newPKI(n.path("pki"))
	if err != nil {
		return err
	}
	n.pki = p
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL, err := n.startEtcd(ports[0], ports[1])
	if err != nil {
		return err
	}
	if err := n.startAPIServer(ctx, etcdURL, ports[2]); err != nil {
		return err
	}
	return n.startComponents()
}

// startEtcd starts the API server's etcd on loopback and returns its
// client URL.
func (n *Node) startEtcd(clientPort, peerPort int) (string, error) {
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	_, err := n.start("etcd", filepath.Join(n.cfg.Bin, "etcd"), "--data-dir", n.path("etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer, "--unsafe-no-fsync")
	return client, err
}

// startAPIServer starts the API server on the host's address and port,
// writes the administrator's kubeconfig and waits until it is ready.
func (n *Node) startAPIServer(ctx context.Context, etcdURL string, port int) error {
	p := n.pki
	serviceIP := "10.96.0.1" // the first address of ServiceCIDR: kubernetes.default
	apiCert, apiKey, err := p.issue("apiserver", "kube-apiserver", nil,
		[]string{"127.0.0.1", n.HostIP, serviceIP, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, true)
	if err != nil {
		return err
	}
	kcCert, kcKey, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, false)
	if err != nil {
		return err
	}
	// The front proxy's client certificate: extension API servers and the
	// scheduler's and controller manager's delegated authentication read
	// its CA from the API server.
	fpCert, fpKey, err := p.issue("front-proxy-client", "front-proxy-client", nil, nil, false)
	if err != nil {
		return err
	}
	saPriv, saPub, err := p.keyPair("sa")
	if err != nil {
		return err
	}
	n.saKey = saPriv
	n.server = fmt.Sprintf("https://%s:%d", n.HostIP, port)
	if _, err := n.start("kube-apiserver", filepath.Join(n.cfg.Bin, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "0.0.0.0", "--secure-port", strconv.Itoa(port), "--advertise-address", n.HostIP,
		"--tls-cert-file", apiCert, "--tls-private-key-file", apiKey, "--client-ca-file", p.caFile(),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saPriv,
		"--service-cluster-ip-range", ServiceCIDR,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction", "--allow-privileged=true",
		"--kubelet-client-certificate", kcCert, "--kubelet-client-key", kcKey, "--kubelet-certificate-authority", p.caFile(),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--proxy-client-cert-file", fpCert, "--proxy-client-key-file", fpKey,
		"--requestheader-client-ca-file", p.caFile(), "--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User", "--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--cert-dir", n.path("pki", "apiserver-certs")); err != nil {
		return err
	}

	if n.Kubeconfig, err = n.kubeconfig("admin", "admin", "system:masters"); err != nil {
		return err
	}
	rest, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	n.Client = cs
	return n.until(ctx, time.Minute, "API server ready", func() error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// kubeconfig issues a client certificate for user cn in groups orgs and
// writes a kubeconfig with it, name.kubeconfig in the node's directory.
func (n *Node) kubeconfig(name, cn string, orgs ...string) (string, error) {
	cert, key, err := n.pki.issue(name, cn, orgs, nil, false)
	if err != nil {
		return "", err
	}
	path := n.path(name + ".kubeconfig")
	return path, writeKubeconfig(path, n.server, n.pki.caFile(), cert, key)
}

// startComponents starts the controller manager, the scheduler and
// kube-proxy, and writes the kubelet's certificates and kubeconfig.
func (n *Node) startComponents() error {
	// The controller manager and the scheduler: each its own identity, for
	// its work and for checking who calls its own port.
	component := func(name, user string, args ...string) error {
		kc, err := n.kubeconfig(name, user)
		if err != nil {
			return err
		}
		_, err = n.start(name, filepath.Join(n.cfg.Bin, name), append([]string{"--kubeconfig", kc,
			"--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--leader-elect=false", "--bind-address", "127.0.0.1"}, args...)...)
		return err
	}
	p := n.pki
	if err := component("kube-controller-manager", "system:kube-controller-manager",
		"--use-service-account-credentials",
		"--service-account-private-key-file", n.saKey, "--root-ca-file", p.caFile(),
		"--cluster-signing-cert-file", p.caFile(), "--cluster-signing-key-file", filepath.Join(p.dir, "ca.key"),
		"--service-cluster-ip-range", ServiceCIDR, "--allocate-node-cidrs=false", "--controllers=*"); err != nil {
		return err
	}
	if err := component("kube-scheduler", "system:kube-scheduler"); err != nil {
		return err
	}
	proxyKubeconfig, err := n.kubeconfig("kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	if _, err := n.start("kube-proxy", filepath.Join(n.cfg.Bin, "kube-proxy"),
		"--kubeconfig", proxyKubeconfig, "--proxy-mode", "iptables", "--cluster-cidr", PodCIDR,
		"--hostname-override", NodeName, "--bind-address", n.HostIP); err != nil {
		return err
	}
	if _, _, err := p.issue("kubelet-serving", "system:node:"+NodeName, []string{"system:nodes"}, []string{n.HostIP, NodeName}, true); err != nil {
		return err
	}
	_, err = n.kubeconfig("kubelet", "system:node:"+NodeName, "system:nodes")
	return err
}

// freePorts returns n TCP ports free on all addresses now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
