package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	daprsdk "github.com/dapr/go-sdk/client"
)

// daprProc is a sidecar process serving Dapr's lock API over HTTP on a
// loopback port and over gRPC on a loopback port or a unix socket.
type daprProc struct {
	*proc
	httpPort int
	grpc     string // host:port, or the unix socket's path
	unix     bool
}

// startDapr starts baton-dapr, the sidecar of pods that speak Dapr, with
// Dapr's API on.
func startDapr(t *testing.T, dir, name, scope string, unix bool, extra ...string) *daprProc {
	t.Helper()
	_, port, _ := net.SplitHostPort(freePort(t))
	p := &daprProc{unix: unix}
	p.httpPort, _ = strconv.Atoi(port)
	grpcFlag := ""
	if unix {
		p.grpc = filepath.Join(dir, name+"-dapr-grpc.sock")
		grpcFlag = "unix://" + p.grpc
	} else {
		p.grpc = freePort(t)
		grpcFlag = p.grpc
	}
	p.proc = startBinary(t, daprBinary(t), filepath.Join(dir, name+".sock"), scope, append([]string{
		"--dapr-http-addr", "127.0.0.1:" + strconv.Itoa(p.httpPort), "--dapr-grpc-addr", grpcFlag, "--dapr-app-id", "orders"}, extra...)...)
	return p
}

// daprDriver is a Dapr SDK, as an app uses it.
type daprDriver interface {
	lock(p *daprProc, resource, owner string, expiry int32) (bool, error)
	unlock(p *daprProc, resource, owner string) (int32, error)
}

// goSDK drives Dapr's Go SDK over gRPC: TCP or the unix socket, as the
// sidecar serves it.
type goSDK struct {
	t       *testing.T
	clients map[*daprProc]daprsdk.Client
}

func (g *goSDK) client(p *daprProc) daprsdk.Client {
	if c, ok := g.clients[p]; ok {
		return c
	}
	var (
		c   daprsdk.Client
		err error
	)
	if p.unix {
		c, err = daprsdk.NewClientWithSocket(p.grpc)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err = daprsdk.NewClientWithAddressContext(ctx, p.grpc)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(c.Close)
	g.clients[p] = c
	return c
}

func (g *goSDK) lock(p *daprProc, resource, owner string, expiry int32) (bool, error) {
	r, err := g.client(p).TryLockAlpha1(context.Background(), "lockstore", &daprsdk.LockRequest{ResourceID: resource, LockOwner: owner, ExpiryInSeconds: expiry})
	if err != nil {
		return false, err
	}
	return r.Success, nil
}

func (g *goSDK) unlock(p *daprProc, resource, owner string) (int32, error) {
	r, err := g.client(p).UnlockAlpha1(context.Background(), "lockstore", &daprsdk.UnlockRequest{ResourceID: resource, LockOwner: owner})
	if err != nil {
		return 0, err
	}
	return r.StatusCode, nil
}

// nodeSDK drives Dapr's Node SDK over HTTP, through test/dapr/node's
// driver (make dapr-node installs both into bin/dapr-node).
type nodeSDK struct {
	t     *testing.T
	in    io.Writer
	out   *bufio.Reader
	store string
	id    int
}

func startNodeSDK(t *testing.T) *nodeSDK {
	t.Helper()
	dir := os.Getenv("BATON_DAPR_NODE")
	if dir == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("BATON_DAPR_NODE is not set: run the tests with make test, which installs Dapr's Node SDK")
		}
		t.Skip("BATON_DAPR_NODE is not set: make dapr-node installs Dapr's Node SDK, make test sets it")
	}
	dir, _ = filepath.Abs(dir)
	cmd := exec.Command("node", filepath.Join(dir, "driver.mjs"))
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("node: %v", err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if s := stderr.String(); s != "" {
			t.Logf("node's stderr: %s", s)
		}
	})
	return &nodeSDK{t: t, in: in, out: bufio.NewReader(out), store: "lockstore"}
}

// nodeAnswer is one line of the driver's.
type nodeAnswer struct {
	ID      int             `json:"id"`
	Success *bool           `json:"success"`
	Status  *int32          `json:"status"`
	Error   json.RawMessage `json:"error"`
}

func (n *nodeSDK) call(req map[string]any) (nodeAnswer, error) {
	n.id++
	req["id"], req["store"] = n.id, n.store
	b, _ := json.Marshal(req)
	if _, err := n.in.Write(append(b, '\n')); err != nil {
		n.t.Fatalf("node driver: %v", err)
	}
	line, err := n.out.ReadBytes('\n')
	if err != nil {
		n.t.Fatalf("node driver: %v", err)
	}
	var a nodeAnswer
	if err := json.Unmarshal(line, &a); err != nil || a.ID != n.id {
		n.t.Fatalf("node driver answered %q to request %d", line, n.id)
	}
	if a.Error != nil {
		return a, errors.New(string(a.Error))
	}
	return a, nil
}

func (n *nodeSDK) lock(p *daprProc, resource, owner string, expiry int32) (bool, error) {
	a, err := n.call(map[string]any{"op": "lock", "port": p.httpPort, "resource": resource, "owner": owner, "expiry": expiry})
	if err != nil {
		return false, err
	}
	if a.Success == nil {
		n.t.Fatal("node driver: a lock answer without success")
	}
	return *a.Success, nil
}

func (n *nodeSDK) unlock(p *daprProc, resource, owner string) (int32, error) {
	a, err := n.call(map[string]any{"op": "unlock", "port": p.httpPort, "resource": resource, "owner": owner})
	if err != nil {
		return 0, err
	}
	if a.Status == nil {
		n.t.Fatal("node driver: an unlock answer without status")
	}
	return *a.Status, nil
}

// TestDaprSDKs: Dapr's Node SDK (HTTP) and Go SDK (gRPC over TCP and over
// a unix socket), each with two real sidecars and a client on each, on one
// lock: lock, contention, unlock by its owner and by another, unlock of a
// free lock, expiry, bad input, and a SIGKILL of the holder's sidecar,
// whose lock the other gets once its lease has expired.
func TestDaprSDKs(t *testing.T) {
	for _, sdk := range []string{"node", "go"} {
		t.Run(sdk, func(t *testing.T) {
			var drv daprDriver
			if sdk == "node" {
				drv = startNodeSDK(t)
			} else {
				drv = &goSDK{t: t, clients: map[*daprProc]daprsdk.Client{}}
			}
			dir, _ := os.MkdirTemp("", "baton-dapr")
			t.Cleanup(func() { os.RemoveAll(dir) })
			scope := "dapr-" + sdk
			metrics := freePort(t)
			a, b := startDapr(t, dir, "a", scope, false), startDapr(t, dir, "b", scope, true, "--metrics-addr", metrics)
			daprScenario(t, drv, a, b)
			// Dapr's calls are acquisitions as any other, in the metrics.
			fams := scrapeMetrics(t, metrics)
			granted, _ := value(fams, "baton_acquisitions_total", map[string]string{"result": "granted"})
			refused, _ := value(fams, "baton_acquisitions_total", map[string]string{"result": "refused"})
			if granted < 2 || refused < 3 {
				t.Errorf("b's baton_acquisitions_total: %v granted, %v refused; want at least 2 and 3", granted, refused)
			}
		})
	}
}

func daprScenario(t *testing.T, drv daprDriver, a, b *daprProc) {
	lock := func(p *daprProc, res, owner string, expiry int32, want bool) {
		t.Helper()
		got, err := drv.lock(p, res, owner, expiry)
		if err != nil || got != want {
			t.Fatalf("lock %s by %s: %v, %v; want %v", res, owner, got, err, want)
		}
	}
	unlock := func(p *daprProc, res, owner string, want int32) {
		t.Helper()
		got, err := drv.unlock(p, res, owner)
		if err != nil || got != want {
			t.Fatalf("unlock %s by %s: %v, %v; want status %d", res, owner, got, err, want)
		}
	}
	lock(a, "job", "exec-a", 60, true)
	lock(b, "job", "exec-b", 60, false)
	lock(a, "job", "exec-a", 60, false)
	unlock(b, "job", "exec-b", 2)
	unlock(a, "job", "exec-a", 0)
	unlock(a, "job", "exec-a", 1)

	// retry tries to lock res through p until it is granted, and says
	// how long that took.
	retry := func(p *daprProc, res, owner string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			got, err := drv.lock(p, res, owner, 300)
			if err != nil {
				t.Fatal(err)
			}
			if got {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("%s still held after %v", res, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	lock(a, "short", "exec-a", 1, true)
	retry(b, "short", "exec-b", 10*time.Second) // its expiry: 1s
	unlock(a, "short", "exec-a", 1)
	unlock(b, "short", "exec-b", 0)

	for _, tt := range []struct {
		store, res, owner string
		expiry            int32
		want              string
	}{
		{"", "", "exec-a", 5, "ResourceId is empty in lock store lockstore"},
		{"", "r", "", 5, "LockOwner is empty in lock store lockstore"},
		{"", "r", "exec-a", 0, "ExpiryInSeconds is not positive in lock store lockstore"},
		{"", "r", "exec-a", -5, "ExpiryInSeconds is not positive in lock store lockstore"},
		{"nope", "r", "exec-a", 5, "lock store nope not found"},
	} {
		var err error
		if n, ok := drv.(*nodeSDK); ok && tt.store != "" {
			n.store = tt.store
			_, err = drv.lock(a, tt.res, tt.owner, tt.expiry)
			n.store = "lockstore"
		} else if tt.store != "" {
			_, err = drv.(*goSDK).client(a).TryLockAlpha1(context.Background(), tt.store, &daprsdk.LockRequest{ResourceID: tt.res, LockOwner: tt.owner, ExpiryInSeconds: tt.expiry})
		} else {
			_, err = drv.lock(a, tt.res, tt.owner, tt.expiry)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("lock %q by %q for %ds in store %q: %v; want an error saying %q", tt.res, tt.owner, tt.expiry, tt.store, err, tt.want)
		}
	}

	// The holder's sidecar is SIGKILLed: its lease expires (TTL 2s) and
	// the lock with it.
	lock(a, "migration", "exec-a", 300, true)
	lock(b, "migration", "exec-b", 300, false)
	if h := holderOf(t, b, "dapr/orders/migration"); h != "exec-a" {
		t.Fatalf("Baton's status of dapr/orders/migration names %q, want exec-a", h)
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	gap := retry(b, "migration", "exec-b", 15*time.Second)
	t.Logf("the lock was granted through b %v after a's sidecar was SIGKILLed (lease TTL 2s)", gap)
	if gap < time.Second {
		t.Fatalf("granted %v after the SIGKILL, before the lease could expire", gap)
	}
	if h := holderOf(t, b, "dapr/orders/migration"); h != "exec-b" {
		t.Fatalf("Baton's status names %q, want exec-b", h)
	}
}

// holderOf is the owner Baton's socket API names for key.
func holderOf(t *testing.T, p *daprProc, key string) string {
	t.Helper()
	resp, err := unixClient(p.socket).Get("http://baton/v1/locks/" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Held   bool `json:"held"`
		Holder struct {
			Owner string `json:"owner"`
		} `json:"holder"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Holder.Owner
}

// TestDaprFlags: the Dapr options' bad values name their flag.
func TestDaprFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--dapr-http-addr=3500"}, "--dapr-http-addr: \"3500\": want host:port"},
		{[]string{"--dapr-grpc-addr=unix:relative.sock"}, "--dapr-grpc-addr: \"unix:relative.sock\": a unix socket's path must be absolute"},
		{[]string{"--dapr-grpc-addr=example.com:50001"}, "the host must be an IP address or localhost"},
		{[]string{"--dapr-http-addr=127.0.0.1:3500", "--dapr-grpc-addr=127.0.0.1:3500"}, "the same address as --dapr-http-addr"},
		{[]string{"--dapr-http-addr=127.0.0.1:3500", "--dapr-store=name=a/b"}, "--dapr-store \"name=a/b\""},
		{[]string{"--dapr-http-addr=127.0.0.1:3500", "--dapr-store=name=a", "--dapr-store=name=a"}, "--dapr-store: store \"a\" is given twice"},
		{[]string{"--dapr-http-addr=127.0.0.1:3500", "--dapr-app-id=a||b"}, "--dapr-app-id: app id \"a||b\" may not contain"},
		{[]string{"--dapr-store=name=a"}, "set --dapr-http-addr or --dapr-grpc-addr"},
	} {
		var out, errb strings.Builder
		args := append([]string{"serve", "--socket", filepath.Join(dir, "s.sock"), "--etcd-endpoints", "http://127.0.0.1:1"}, tt.args...)
		if code := run(context.Background(), args, env(nil), &out, &errb); code != 2 || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, errb.String(), tt.want)
		}
	}
	// A port in use is named too.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var out, errb strings.Builder
	args := []string{"serve", "--socket", filepath.Join(dir, "s.sock"), "--etcd-endpoints", "http://127.0.0.1:1", "--health-addr", "", "--dapr-grpc-addr", busy.Addr().String()}
	if code := run(context.Background(), args, env(nil), &out, &errb); code == 0 || !strings.Contains(errb.String(), "--dapr-grpc-addr") {
		t.Errorf("a busy gRPC port: exit %d, stderr %q", code, errb.String())
	}
}
