package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/embedetcd"
)

// etcdChildEnv names the data directory of the etcd that a re-executed
// bench binary runs instead of the bench.
const etcdChildEnv = "BATON_BENCH_ETCD"

// runEtcdChild runs a single member with fsync on, clients on a unix
// socket in dir, until SIGTERM.
func runEtcdChild(dir string) int {
	cfg := embedetcd.Default(filepath.Join(dir, "etcd"))
	cfg.ClientURL = "unix://" + filepath.Join(dir, "etcd.sock")
	e, err := embedetcd.Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	readyUntilSignal("ready")
	e.Close()
	return 0
}

// readyUntilSignal tells the bench that a child is ready, with line on
// its standard output, and returns once it is told to stop (SIGTERM or
// SIGINT).
func readyUntilSignal(line string) {
	fmt.Println(line)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// proc is a child process that printed a ready line.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startProc(cmd *exec.Cmd, ready string) (*proc, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		if !strings.Contains(l, ready) {
			p.kill()
			return nil, fmt.Errorf("%s: first line %q", cmd.Path, l)
		}
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("%s: not ready after 60s", cmd.Path)
	}
	return p, nil
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// term SIGTERMs the process and returns how long it took to exit.
func (p *proc) term() time.Duration {
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	return time.Since(start)
}

// rss returns the resident set size of the process in bytes.
func (p *proc) rss() int64 { return statusRSS(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)) }

// statusRSS reads VmRSS, in bytes, from a /proc/<pid>/status file; 0 when
// it cannot.
func statusRSS(path string) int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// etcdProc is the bench's etcd.
type etcdProc struct {
	*proc
	endpoint string
}

func startEtcd(dir string) (*etcdProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), etcdChildEnv+"="+dir)
	p, err := startProc(cmd, "ready")
	if err != nil {
		return nil, err
	}
	return &etcdProc{proc: p, endpoint: "unix://" + filepath.Join(dir, "etcd.sock")}, nil
}

func (e *etcdProc) stop() { e.term() }

// sidecar is a `baton serve` process on the bench's etcd.
type sidecar struct {
	*proc
	socket string
	http   *http.Client
}

func (w *world) startSidecar(name string, extra ...string) (*sidecar, error) {
	return w.startSidecarOn(name, w.etcd.endpoint, extra...)
}

// startSidecarOn is startSidecar on the etcd at endpoints.
func (w *world) startSidecarOn(name, endpoints string, extra ...string) (*sidecar, error) {
	return w.startBuild(w.o.baton, name, endpoints, extra...)
}

// startBuild is startSidecarOn with the baton binary bin.
func (w *world) startBuild(bin, name, endpoints string, extra ...string) (*sidecar, error) {
	socket := filepath.Join(w.dir, name+".sock")
	args := append([]string{"serve", "--socket", socket, "--scope", "bench",
		"--etcd-endpoints", endpoints, "--health-addr", "", "--log-level", "error",
		"--max-waiters", "100000"}, extra...)
	p, err := startProc(exec.Command(bin, args...), "serving on")
	if err != nil {
		return nil, err
	}
	s := newSidecar(p, socket)
	w.sidecars = append(w.sidecars, s)
	return s, nil
}

// newSidecar is p served on socket, with an HTTP client for it.
func newSidecar(p *proc, socket string) *sidecar {
	return &sidecar{proc: p, socket: socket, http: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 256,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}}
}

// world is what the bench runs against.
type world struct {
	o        options
	dir      string
	etcd     *etcdProc
	cli      *clientv3.Client
	sidecars []*sidecar
	redis    *redisServer
	main     *sidecar     // the sidecar the cycles run on
	mainProf string       // main's pprof address, when a profile was asked for
	etcdHTTP *http.Client // to etcd's /metrics, made when first needed
}

func (w *world) connect() error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{w.etcd.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	w.cli = cli
	return nil
}

func (w *world) close() {
	for _, s := range w.sidecars {
		select {
		case <-s.exited:
		default:
			s.term()
		}
	}
	if w.redis != nil {
		w.redis.stop()
	}
	if w.cli != nil {
		w.cli.Close()
	}
}

// raftIndex is etcd's raft index: it grows with every proposal, a write or
// a transaction whose compare failed alike.
func (w *world) raftIndex(ctx context.Context) (uint64, error) {
	st, err := w.cli.Status(ctx, w.etcd.endpoint)
	if err != nil {
		return 0, err
	}
	return st.RaftIndex, nil
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// fetchProfile writes a CPU profile of d taken from a sidecar's pprof.
func fetchProfile(addr string, d time.Duration, path string) error {
	return fetchPprof(addr, fmt.Sprintf("profile?seconds=%d", max(1, int(d.Seconds()))), path)
}

// fetchPprof writes the profile name (with its query) of a sidecar's pprof.
func fetchPprof(addr, name, path string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s", addr, name))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
