// Package kubenode runs a real one-node Kubernetes on this machine, for
// tests and for `make cluster`: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kube-proxy built by
// the Makefile into bin/k8s, and containerd, runc and the CNI plugins from
// Debian's packages, each started as a process of its own with its log in
// the node's directory. Images come from docker-archive tarballs imported
// into containerd: there is no registry.
//
// It needs root, cgroups and iptables: it changes the host's network
// (a bridge, iptables chains) and undoes what it can on Stop.
//
// What differs from a managed cluster: one node, which is also the control
// plane, so nothing is spread or drained; no cloud provider, so no
// LoadBalancer addresses; PersistentVolumes are directories of the node's
// own (StorageClass local), created up front rather than provisioned; the
// cluster DNS has no upstream, so only cluster names resolve; images come
// only from the tarballs imported at start (every pod must use
// imagePullPolicy IfNotPresent or Never); etcd runs without fsync; the
// kubelet runs on cgroups v1 through cgroupfs with failCgroupV1 false, and
// containerd may not lower oom_score_adj (root here lacks
// CAP_SYS_RESOURCE). Certificates are issued once at start, from a CA of
// the node's own, and never rotated.
package kubenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Config says where the node's parts are and what it runs.
type Config struct {
	// Dir holds the node's state, certificates and logs. Required.
	Dir string
	// Bin is the directory of etcd and the Kubernetes binaries. Required.
	Bin string
	// Images are docker-archive tarballs imported into containerd before
	// the node starts; one must be PauseImage's.
	Images []string
	// PauseImage is the pods' sandbox image, named as in its tarball.
	PauseImage string
	// DNSImage, when set, is CoreDNS's image: the node then serves the
	// cluster's names at DNSServiceIP, as every cluster does.
	DNSImage string
	// Volumes is how many PersistentVolumes of VolumeSize the node offers
	// through its default StorageClass. Default 12 of 10Gi (directories: the
	// size is what the claims see, not disk taken).
	Volumes    int
	VolumeSize string
	// Ready bounds the wait for the node to be Ready. Default 2 minutes.
	Ready time.Duration
}

// Node is a running node.
type Node struct {
	cfg Config
	// Kubeconfig is an administrator's kubeconfig (system:masters).
	Kubeconfig string
	// Client is a client with the administrator's identity.
	Client kubernetes.Interface
	// HostIP is the address the API server and the node advertise.
	HostIP string

	containerdSock string
	pki            *nodeCerts
	server         string // the API server's URL
	saKey          string // the service accounts' signing key
	procs          []*proc
	host           hostState // what the kubelet and the network change, as it was before the node
}

// proc is a process of the node.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
}

// Start starts the node and returns once it is Ready. On error it stops
// whatever it started.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Dir == "" || cfg.Bin == "" || cfg.PauseImage == "" {
		return nil, errors.New("kubenode: Dir, Bin and PauseImage are required")
	}
	if cfg.Ready == 0 {
		cfg.Ready = 2 * time.Minute
	}
	if cfg.Volumes == 0 {
		cfg.Volumes, cfg.VolumeSize = 12, "10Gi"
	}
	if err := preflight(cfg); err != nil {
		return nil, err
	}
	ip, err := hostIP()
	if err != nil {
		return nil, err
	}
	// What an earlier node killed without its Stop left goes first; the
	// host's state from before any node is recorded (or was, by that
	// node).
	host, err := recordHost(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("kubenode: record the host's settings: %w", err)
	}
	n = &Node{cfg: cfg, HostIP: ip, host: host}
	n.cleanHost()
	defer func() {
		if err != nil {
			n.Stop()
			err = fmt.Errorf("%w (logs in %s)", err, n.LogDir())
		}
	}()
	for _, d := range []string{n.LogDir(), n.path("etcd"), n.path("kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return n, err
		}
	}
	if err := guardServices(); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	if err := n.startControlPlane(ctx); err != nil {
		return n, err
	}
	if err := n.startKubelet(); err != nil {
		return n, err
	}
	if err := n.waitReady(ctx); err != nil {
		return n, err
	}
	if err := n.provideStorage(ctx, cfg.Volumes, cfg.VolumeSize); err != nil {
		return n, fmt.Errorf("kubenode: storage: %w", err)
	}
	if cfg.DNSImage != "" {
		if err := n.deployDNS(ctx, cfg.DNSImage); err != nil {
			return n, fmt.Errorf("kubenode: cluster DNS: %w", err)
		}
	}
	return n, nil
}

// LogDir is the directory of the node's logs, a file per process.
func (n *Node) LogDir() string { return n.path("logs") }

func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.cfg.Dir}, elem...)...)
}

// preflight says what is missing before anything starts.
func preflight(cfg Config) error {
	if os.Geteuid() != 0 {
		return errors.New("kubenode: a node needs root (cgroups, mounts, iptables)")
	}
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(cfg.Bin, b)); err != nil {
			missing = append(missing, filepath.Join(cfg.Bin, b)+" (make node-assets)")
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "conntrack"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (make node-deps)")
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		missing = append(missing, filepath.Join(cniBinDir, "bridge")+" (make node-deps)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("kubenode: missing %s", strings.Join(missing, ", "))
	}
	// The kubelet's, kube-proxy's, the scheduler's and the controller
	// manager's fixed ports: one node per machine.
	for _, port := range []int{10250, 10248, 10249, 10256, 10257, 10259} {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return fmt.Errorf("kubenode: port %d is taken: another node runs on this machine (make cluster-down stops the one make cluster started): %w", port, err)
		}
		l.Close()
	}
	return nil
}

// start starts a process of the node, its output in the log directory.
func (n *Node) start(name, bin string, args ...string) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(n.LogDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // reported by exited
		close(p.exited)
	}()
	n.procs = append(n.procs, p)
	return p, nil
}

// until polls cond every 100ms until it is true, ctx ends, d passes or one
// of the node's processes exits.
func (n *Node) until(ctx context.Context, d time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		for _, p := range n.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("kubenode: %s exited while waiting for %s: %s", p.name, what, p.cmd.ProcessState)
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubenode: no %s after %v: %w", what, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startContainerd starts containerd and imports the images.
func (n *Node) startContainerd(ctx context.Context) error {
	dir := n.path("containerd")
	n.containerdSock = filepath.Join(dir, "containerd.sock")
	if err := writeFile(filepath.Join(dir, "config.toml"), containerdConfig(dir, n.cfg.PauseImage)); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "cni", "10-baton.conflist"), cniConfig(filepath.Join(dir, "ipam"))); err != nil {
		return err
	}
	if _, err := n.start("containerd", "containerd", "--config", filepath.Join(dir, "config.toml")); err != nil {
		return err
	}
	if err := n.until(ctx, 30*time.Second, "containerd socket", func() error {
		return exec.Command("ctr", "--address", n.containerdSock, "version").Run()
	}); err != nil {
		return err
	}
	for _, img := range n.cfg.Images {
		if err := n.ImportImage(img); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage imports a docker-archive tarball into the node's containerd,
// where pods find it by the name in the tarball.
func (n *Node) ImportImage(tarball string) error {
	out, err := exec.Command("ctr", "--address", n.containerdSock, "-n", "k8s.io", "images", "import", "--no-unpack", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubenode: import %s: %w: %s", tarball, err, out)
	}
	return nil
}

// startKubelet starts the kubelet.
func (n *Node) startKubelet() error {
	pki := n.path("pki")
	resolv := n.path("resolv.conf")
	if err := writeFile(resolv, "nameserver "+DNSServiceIP+"\n"); err != nil { // the host's resolver, if any, is not the cluster's
		return err
	}
	cfg := n.path("kubelet.yaml")
	if err := writeFile(cfg, kubeletConfig(n.containerdSock, filepath.Join(pki, "ca.crt"),
		filepath.Join(pki, "kubelet-serving.crt"), filepath.Join(pki, "kubelet-serving.key"), resolv, n.path("pod-logs"))); err != nil {
		return err
	}
	_, err := n.start("kubelet", filepath.Join(n.cfg.Bin, "kubelet"), "--config", cfg, "--kubeconfig", n.path("kubelet.kubeconfig"),
		"--root-dir", n.path("kubelet"), "--hostname-override", NodeName, "--node-ip", n.HostIP)
	return err
}

// waitReady waits for the node to be Ready and schedulable, and for the
// default namespace's ServiceAccount, which pods need.
func (n *Node) waitReady(ctx context.Context) error {
	return n.until(ctx, n.cfg.Ready, "Ready node", func() error {
		node, err := n.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s: %s", c.Reason, c.Message)
			}
		}
		for _, t := range node.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoSchedule {
				return fmt.Errorf("node tainted %s", t.Key)
			}
		}
		_, err = n.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// Stop stops the node's processes, the last started first, and undoes what
// they changed on the host as far as it can: pods' processes and cgroups,
// mounts under Dir, the bridge, kube-proxy's and CNI's iptables chains,
// the sysctls they set.
func (n *Node) Stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only once it exited
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.log.Close()
	}
	n.procs = nil
	n.cleanHost()
	unmountUnder(n.cfg.Dir)
	_ = restoreHost(n.cfg.Dir) // best effort, as the rest
}

// cleanHost removes what a node leaves on the host once its processes are
// gone: pods' processes and network namespaces, kube-proxy's, the
// kubelet's and its own iptables chains, the pods' masquerade chains and
// the bridge. Start calls it too, for what
// a node killed without its Stop left behind (one node runs per machine,
// so none of it belongs to another).
func (n *Node) cleanHost() { cleanHost(n.cfg.Dir, n.cfg.Bin) }

// PrintLogs writes the tail of every process's log to w, for a failed test.
func (n *Node) PrintLogs(w io.Writer, lines int) { PrintLogs(w, n.LogDir(), lines) }

// PrintLogs writes the last lines of every log in a node's log directory
// to w.
func PrintLogs(w io.Writer, dir string, lines int) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(w, "==== %s (last %d lines)\n%s\n", e.Name(), lines, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
}

// hostIP returns the address of the interface of the default route.
func hostIP() (string, error) {
	c, err := net.Dial("udp4", "203.0.113.1:9") // no packet is sent: this only picks the route
	if err != nil {
		return "", fmt.Errorf("kubenode: no default route for the node's address: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
