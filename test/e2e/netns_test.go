//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// netnsPair is two network namespaces joined by a veth pair.
type netnsPair struct {
	a, b       string // namespace names
	devA, devB string
	ipA, ipB   string
}

// ipCmd runs ip with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// newNetnsPair makes the namespaces, or says why it cannot.
func newNetnsPair(t *testing.T) (*netnsPair, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, "needs root for ip netns"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, "needs the ip command (iproute2)"
	}
	id := rand.N(1_000_000)
	n := &netnsPair{a: fmt.Sprintf("bzA%d", id), b: fmt.Sprintf("bzB%d", id),
		devA: fmt.Sprintf("vA%d", id), devB: fmt.Sprintf("vB%d", id), ipA: "10.231.7.1", ipB: "10.231.7.2"}
	if err := ipCmd("netns", "add", n.a); err != nil {
		return nil, err.Error()
	}
	t.Cleanup(func() { ipCmd("netns", "del", n.a) })
	steps := [][]string{
		{"netns", "add", n.b},
		{"link", "add", n.devA, "type", "veth", "peer", "name", n.devB},
		{"link", "set", n.devA, "netns", n.a},
		{"link", "set", n.devB, "netns", n.b},
		{"-n", n.a, "addr", "add", n.ipA + "/24", "dev", n.devA},
		{"-n", n.b, "addr", "add", n.ipB + "/24", "dev", n.devB},
		{"-n", n.a, "link", "set", "lo", "up"},
		{"-n", n.b, "link", "set", "lo", "up"},
		{"-n", n.a, "link", "set", n.devA, "up"},
		{"-n", n.b, "link", "set", n.devB, "up"},
	}
	for i, s := range steps {
		if err := ipCmd(s...); err != nil {
			return nil, err.Error()
		}
		if i == 0 {
			t.Cleanup(func() { ipCmd("netns", "del", n.b) })
		}
	}
	return n, ""
}

// TestS10KernelPartition: the holder's sidecar runs in its own network
// namespace and reaches etcd (in another) over a veth pair, through the
// kernel's TCP. Setting the link down for 2 × TTL must make its app hear
// `lost` before a waiter elsewhere is granted the lock.
func TestS10KernelPartition(t *testing.T) {
	n, why := newNetnsPair(t)
	if n == nil {
		report.skip("S10 kernel-level partition", why)
		t.Skip(why)
	}
	e := &env{t: t, dir: shortDir(t), base: time.Now()}
	e.h = newHistory(e.base)
	e.store = newStore(t, e.dir, true, e.base)
	spec := etcdSpec{
		Name: "e0", Dir: filepath.Join(e.dir, "etcd"), WorkDir: e.dir, Netns: n.b,
		ClientURL:     "unix://" + filepath.Join(e.dir, "etcd.sock"),
		TCPClientURL:  "http://" + n.ipB + ":2379",
		ListenPeerURL: "unix://etcd-peer.sock", PeerURL: "unix://etcd-peer.sock",
		InitialCluster: "e0=unix://etcd-peer.sock",
	}
	e.etcd = startEtcdProc(t, spec)
	e.etcd.awaitReady(t)
	e.cli = etcdClient(t, []string{spec.ClientURL})
	cut := startSidecar(t, e.dir, "s0", []string{spec.TCPClientURL}, sidecarOptions{direct: true, netns: n.a})
	other := startSidecar(t, e.dir, "s1", []string{spec.ClientURL}, sidecarOptions{direct: true})
	e.sidecars = []*sidecar{cut, other}
	holder, waiter := e.apps(cut, 1, 5*time.Millisecond)[0], e.apps(other, 1, 5*time.Millisecond)[0]

	var faults, recoveries []time.Duration
	for round := range scale(2, 5) {
		lock := fmt.Sprintf("s10-%d", round)
		done := holdOnce(holder, lock, holdPlan{increments: 1, holdFor: 4 * leaseTTL})
		e.waitHolding(lock, holder.owner)
		waited := holdOnce(waiter, lock, holdPlan{wait: 30 * time.Second, increments: 1})
		e.waitQueued(lock, 2)
		faults = append(faults, e.h.now())
		must(t, ipCmd("-n", n.a, "link", "set", n.devA, "down"))
		time.Sleep(2 * leaseTTL)
		must(t, ipCmd("-n", n.a, "link", "set", n.devA, "up"))
		up := time.Now()
		if !<-waited {
			e.dump()
			t.Fatalf("round %d: the waiter was not granted the cut-off holder's lock", round)
		}
		<-done
		// The cut-off sidecar reconnects once TCP retransmits or gRPC's
		// keepalive notice the link is back.
		for !ready(cut) {
			if time.Since(up) > 30*time.Second {
				e.dump()
				t.Fatalf("round %d: the cut-off sidecar not ready 30s after the link came back", round)
			}
			time.Sleep(50 * time.Millisecond)
		}
		recoveries = append(recoveries, time.Since(up))
	}
	e.finish("S10 kernel partition (netns, link down)", requirements{noOverlap: true, minOK: 2 * len(faults)}, func(o *outcome) {
		ops := e.h.snapshot()
		o.leads = detectionLeads(ops)
		if len(o.leads) != len(faults) {
			t.Errorf("%d detection leads for %d partitions: a cut-off holder was not told lost before the next grant", len(o.leads), len(faults))
		}
		for _, l := range o.leads {
			if l <= 0 {
				t.Errorf("detection lead %v: the old holder heard lost only after the new grant", l)
			}
		}
		for i, f := range faults {
			o.gaps = append(o.gaps, reacquireGaps(ops, fmt.Sprintf("s10-%d", i), []time.Duration{f})...)
		}
		o.note("sidecar in netns %s, etcd in netns %s over veth; link down for 2×TTL, %d times; the cut-off sidecar ready again %s after the link came back",
			n.a, n.b, len(faults), quantiles(recoveries, 0, 1))
	})
}

// ready reports whether a sidecar's /readyz answers 200.
func ready(s *sidecar) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	code, _, err := call(ctx, httpClient(s), "GET", "/readyz", "")
	return err == nil && code == 200
}
