//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdChildEnv carries an etcdSpec to a re-executed test binary, which then
// runs one etcd member instead of the tests.
const etcdChildEnv = "BATON_E2E_ETCD"

// etcdSpec is one member of an etcd cluster run in a child process.
type etcdSpec struct {
	Name           string `json:"name"`
	Dir            string `json:"dir"`
	ClientURL      string `json:"client_url"`
	ListenPeerURL  string `json:"listen_peer_url"`
	PeerURL        string `json:"peer_url"` // advertised: a proxy in a cluster
	InitialCluster string `json:"initial_cluster"`
	// TCPClientURL, when set, is a second client URL (a member in its own
	// network namespace serves sidecars across a veth on it).
	TCPClientURL string `json:"tcp_client_url,omitempty"`
	// Netns runs the member in that network namespace (ip netns exec).
	Netns string `json:"netns,omitempty"`
	// WorkDir is the member's working directory. Peer URLs name their unix
	// sockets relative to it: etcd listens on a peer URL's host part only.
	WorkDir string `json:"work_dir"`
}

// runEtcdChild is the child side: start the member, print "ready", stop on
// SIGTERM. fsync stays on, so a SIGKILLed member restarts from its WAL.
func runEtcdChild(raw string) int {
	var s etcdSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "etcd child spec:", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.Dir
	must := func(u string) url.URL {
		p, err := url.Parse(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return *p
	}
	cfg.ListenClientUrls = []url.URL{must(s.ClientURL)}
	cfg.AdvertiseClientUrls = []url.URL{must(s.ClientURL)}
	if s.TCPClientURL != "" {
		cfg.ListenClientUrls = append(cfg.ListenClientUrls, must(s.TCPClientURL))
		cfg.AdvertiseClientUrls = append(cfg.AdvertiseClientUrls, must(s.TCPClientURL))
	}
	cfg.ListenPeerUrls = []url.URL{must(s.ListenPeerURL)}
	cfg.AdvertisePeerUrls = []url.URL{must(s.PeerURL)}
	cfg.InitialCluster = s.InitialCluster
	cfg.InitialClusterToken = "baton-e2e"
	// Warnings and errors go to stderr, which the test shows on failure.
	lcfg := zap.NewProductionConfig()
	lcfg.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	lcfg.Sampling = nil
	lg, err := lcfg.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-sig:
		e.Close()
		return 0
	}
	select {
	case <-sig:
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
	}
	e.Close()
	return 0
}

// etcdProc is a member running in a child process.
type etcdProc struct {
	spec   etcdSpec
	cmd    *exec.Cmd
	ready  chan error
	exited chan struct{}
	stderr *lockedBuffer
}

// startEtcdProc starts a member; wait for it with awaitReady.
func startEtcdProc(t *testing.T, spec etcdSpec) *etcdProc {
	t.Helper()
	raw, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if spec.Netns != "" {
		cmd = exec.Command("ip", "netns", "exec", spec.Netns, os.Args[0], "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), etcdChildEnv+"="+string(raw))
	cmd.Dir = spec.WorkDir
	p := &etcdProc{spec: spec, cmd: cmd, ready: make(chan error, 1), exited: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("first line %q", line)
		}
		p.ready <- err
		io.Copy(io.Discard, out)
	}()
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *etcdProc) awaitReady(t *testing.T) {
	t.Helper()
	if err := p.readyWithin(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// readyWithin waits up to d for the member to be ready.
func (p *etcdProc) readyWithin(d time.Duration) error {
	select {
	case err := <-p.ready:
		if err != nil {
			return fmt.Errorf("etcd %s: %w; stderr: %s", p.spec.Name, err, p.stderr.String())
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("etcd %s not ready after %v; stderr: %s", p.spec.Name, d, p.stderr.String())
	}
}

// kill SIGKILLs the member and waits for it to exit.
func (p *etcdProc) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once continued on some kernels
	p.cmd.Process.Kill()
	<-p.exited
}

// term stops the member gracefully and waits for it to exit.
func (p *etcdProc) term() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
}

// pause and resume stop and continue the member (a stuck leader or disk).
func (p *etcdProc) pause()  { p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *etcdProc) resume() { p.cmd.Process.Signal(syscall.SIGCONT) }

// restart starts the member again on its data directory. A restarted
// member's peer connection sometimes stays inactive and the member never
// joins (etcd-io/etcd#14523); as an operator would, it is restarted again
// after 20 s, up to 3 times.
func (p *etcdProc) restart(t *testing.T) *etcdProc {
	t.Helper()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		q := startEtcdProc(t, p.spec)
		if err = q.readyWithin(20 * time.Second); err == nil {
			return q
		}
		t.Logf("restart %d of etcd %s: %v", attempt, p.spec.Name, err)
		q.kill()
	}
	t.Fatal(err)
	return nil
}

// singleEtcd starts a one-member etcd in a child process, clients on a unix
// socket.
func singleEtcd(t *testing.T, dir string) *etcdProc {
	t.Helper()
	peer := "unix://etcd-peer.sock"
	spec := etcdSpec{
		Name: "e0", Dir: filepath.Join(dir, "etcd"), WorkDir: dir,
		ClientURL:     "unix://" + filepath.Join(dir, "etcd.sock"),
		ListenPeerURL: peer, PeerURL: peer,
		InitialCluster: "e0=" + peer,
	}
	p := startEtcdProc(t, spec)
	p.awaitReady(t)
	return p
}

// cluster is a 3-member etcd whose peer traffic into each member passes
// through a proxy, as etcd's robustness tests do: blackhole, delay or drop
// one member's incoming peer traffic.
type cluster struct {
	members []*etcdProc
	proxies []proxy.Server
}

func startCluster(t *testing.T, dir string) *cluster {
	t.Helper()
	c := &cluster{}
	var specs []etcdSpec
	var initial []string
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		// etcd dials a unix peer URL's host as "host:port", adding ":80"
		// when there is no port, so the names carry one, as etcd's own
		// integration tests do. The proxy treats such a name as a TCP
		// port, so it listens on a plain path that the advertised name
		// links to.
		listen, adv, pxSock := name+"-peer:1", name+"-pp:1", filepath.Join(dir, name+"-pp.sock")
		px := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(),
			From: url.URL{Scheme: "unix", Host: pxSock},
			To:   url.URL{Scheme: "unix", Host: filepath.Join(dir, listen)}})
		must(t, os.Symlink(pxSock, filepath.Join(dir, adv)))
		select {
		case <-px.Ready():
		case err := <-px.Error():
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		go drain(px)
		c.proxies = append(c.proxies, px)
		specs = append(specs, etcdSpec{
			Name: name, Dir: filepath.Join(dir, name), WorkDir: dir,
			ClientURL:     "unix://" + filepath.Join(dir, name+".sock"),
			ListenPeerURL: "unix://" + listen, PeerURL: "unix://" + adv,
		})
		initial = append(initial, name+"=unix://"+adv)
	}
	for _, s := range specs {
		s.InitialCluster = strings.Join(initial, ",")
		c.members = append(c.members, startEtcdProc(t, s))
	}
	for _, m := range c.members {
		m.awaitReady(t)
	}
	return c
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.spec.ClientURL)
	}
	return eps
}

// leader returns the index of the member that leads, asking each live one.
func (c *cluster) leader(t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, m := range c.members {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.spec.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no etcd leader after 20s")
	return -1
}

// etcdClient is the test's own client, for checks of what etcd holds.
func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// drain reads a proxy's errors until it closes. The proxy reports each
// failed accept or dial (peers dialling a member that is down do so every
// 100 ms) on a channel of 16 and its accept loop blocks once that is full:
// unread, the proxy stops taking connections for good and a restarted
// member never hears its peers again.
func drain(px proxy.Server) {
	for {
		select {
		case <-px.Error():
		case <-px.Done():
			return
		}
	}
}
