package kubenode

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killPods kills what the node's pods left running once the kubelet and
// containerd are gone: every process in the kubepods cgroups, and the
// containerd shims that parented them.
func killPods() {
	var pids []int
	_ = filepath.WalkDir("/sys/fs/cgroup/pids/kubepods", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	for _, p := range processes() {
		if strings.HasPrefix(p.name(), "containerd-shim") && strings.Contains(p.cmdline, "k8s.io") {
			pids = append(pids, p.pid)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL) // gone already is fine
	}
}

// killNaming kills a killed node's own processes, should any have
// outlived it: the programs a node starts whose command line names dir
// (not make, nor the shell that waits for the node, which name it too).
func killNaming(dir string) {
	ours := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "containerd"}
	for _, p := range processes() {
		if p.pid != os.Getpid() && slices.Contains(ours, p.name()) && strings.Contains(p.cmdline, dir) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL) // gone already is fine
		}
	}
}

// process is a process of the host, as /proc shows it.
type process struct {
	pid     int
	cmdline string // its arguments, each ended by a NUL
}

// name is the base name of the process's program.
func (p process) name() string {
	return filepath.Base(strings.SplitN(p.cmdline, "\x00", 2)[0])
}

// processes lists the host's processes.
func processes() []process {
	entries, _ := os.ReadDir("/proc")
	var ps []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		ps = append(ps, process{pid: pid, cmdline: string(cmdline)})
	}
	return ps
}

// unmountUnder detaches every mount below dir, the deepest first: the
// kubelet's volumes, containerd's snapshots and sandboxes.
func unmountUnder(dir string) {
	var points []string
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			points = append(points, m.point)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH) // best effort
	}
}

// removePodNetns frees the network namespaces of pods whose sandboxes
// were never torn down (the kubelet and containerd killed first): each is
// pinned by a bind mount named cni-<id>, under containerd's state
// directory or, from nodes before that, /var/run/netns. Once unpinned and
// with no process left in it, a namespace goes and takes its veth pair
// with it. It also removes the CNI plugins' cached results for the node's
// network.
func removePodNetns() {
	for _, m := range mounts() {
		if m.podNetns() {
			_ = syscall.Unmount(m.point, syscall.MNT_DETACH) // best effort
			if filepath.Dir(m.point) == "/var/run/netns" || filepath.Dir(m.point) == "/run/netns" {
				_ = os.Remove(m.point)
			}
		}
	}
	for _, r := range cniResults() {
		_ = os.Remove(r)
	}
}

// cniResults lists the CNI plugins' cached results for the node's network
// and for its pods' loopback (containerd's cni-loopback network).
func cniResults() []string {
	results, _ := filepath.Glob(filepath.Join(cniCacheDir, "results", network+"-*"))
	loopback, _ := filepath.Glob(filepath.Join(cniCacheDir, "results", "cni-loopback-*"))
	return append(results, loopback...)
}

// containerLogLinks is where the kubelet links each container's log, what
// the node's podLogsDir says.
const containerLogLinks = "/var/log/containers"

// removeContainerLogLinks removes the kubelet's links to the logs of the
// containers of the node in dir, and links whose logs are gone (left by a
// node whose directory was removed).
func removeContainerLogLinks(dir string) {
	for _, l := range containerLogs(dir) {
		_ = os.Remove(l) // best effort
	}
}

// containerLogs lists the links of containerLogLinks into dir or to
// nothing.
func containerLogs(dir string) []string {
	entries, _ := os.ReadDir(containerLogLinks)
	var links []string
	for _, e := range entries {
		path := filepath.Join(containerLogLinks, e.Name())
		target, err := os.Readlink(path)
		if err != nil {
			continue
		}
		if _, err := os.Stat(target); err != nil || strings.HasPrefix(target, dir+"/") {
			links = append(links, path)
		}
	}
	return links
}

// mount is a line of /proc/self/mountinfo.
type mount struct{ point, fstype string }

// podNetns reports whether m pins a pod's network namespace: containerd
// names each cni-<id>.
func (m mount) podNetns() bool {
	return m.fstype == "nsfs" && strings.HasPrefix(filepath.Base(m.point), "cni-")
}

// mounts lists this process's mounts.
func mounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []mount
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		ms = append(ms, mount{point: fields[4], fstype: fields[sep+1]})
	}
	return ms
}

// sysctls are the host settings the kubelet, kube-proxy (route_localnet,
// for NodePorts on 127.0.0.1) and the pods' network change.
var sysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet"}

func readSysctls() map[string]string {
	m := map[string]string{}
	for _, k := range sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			m[k] = strings.TrimSpace(string(b))
		}
	}
	return m
}

func restoreSysctls(m map[string]string) {
	for k, v := range m {
		_ = os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644) // best effort
	}
}

// removeKubeletChains removes the iptables chains the kubelet makes:
// KUBE-FIREWALL (which drops traffic to 127/8 from other addresses) and
// its canaries.
func removeKubeletChains() {
	ipt := func(args ...string) { _ = exec.Command("iptables", args...).Run() } // best effort: absent is fine
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		ipt("-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL")
	}
	ipt("-t", "filter", "-F", "KUBE-FIREWALL")
	ipt("-t", "filter", "-X", "KUBE-FIREWALL")
	ipt("-t", "mangle", "-X", "KUBE-IPTABLES-HINT")
	for _, table := range []string{"filter", "nat", "mangle"} {
		ipt("-t", table, "-F", "KUBE-KUBELET-CANARY")
		ipt("-t", table, "-X", "KUBE-KUBELET-CANARY")
	}
}

// removePodMasquerade removes the masquerade rules and chains the bridge
// plugin made for the node's pods (their comments name the network) when
// the pods were killed without the plugin being called to remove them.
func removePodMasquerade() {
	out, err := exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING").Output()
	if err != nil {
		return
	}
	for _, rule := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(rule, "-A POSTROUTING ") || !strings.Contains(rule, `name: \"`+network+`\"`) && !strings.Contains(rule, "name: "+network) {
			continue
		}
		args, err := splitRule(strings.TrimPrefix(rule, "-A POSTROUTING "))
		if err != nil {
			continue
		}
		_ = exec.Command("iptables", append([]string{"-t", "nat", "-D", "POSTROUTING"}, args...)...).Run() // best effort
		for i, a := range args {
			if a == "-j" && i+1 < len(args) && strings.HasPrefix(args[i+1], "CNI-") {
				_ = exec.Command("iptables", "-t", "nat", "-F", args[i+1]).Run()
				_ = exec.Command("iptables", "-t", "nat", "-X", args[i+1]).Run()
			}
		}
	}
}

// splitRule splits a rule as iptables -S prints it into arguments,
// honouring its double quotes.
func splitRule(rule string) ([]string, error) {
	var args []string
	var cur strings.Builder
	quoted, escaped, started := false, false, false
	for _, r := range rule {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted, started = !quoted, true
		case r == ' ' && !quoted:
			if started {
				args, started = append(args, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	if quoted {
		return nil, errors.New("unbalanced quotes")
	}
	if started {
		args = append(args, cur.String())
	}
	return args, nil
}

// removeCNIChains removes the nat chains the bridge plugin made for the
// node's pods (each pod's CNI-<hash>, whose rules name the network), also
// those no rule refers to any more: a pod deleted while the plugin could
// not run left them.
func removeCNIChains() {
	for _, chain := range cniChains() {
		_ = exec.Command("iptables", "-t", "nat", "-F", chain).Run() // best effort
		_ = exec.Command("iptables", "-t", "nat", "-X", chain).Run()
	}
}

// cniChains lists the nat chains named CNI-* whose rules name the node's
// network, or that hold no rule at all.
func cniChains() []string {
	out, err := exec.Command("iptables", "-t", "nat", "-S").Output()
	if err != nil {
		return nil
	}
	rules := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "CNI-"):
			rules[f[1]] = rules[f[1]][:0:0]
		case len(f) > 2 && f[0] == "-A" && strings.HasPrefix(f[1], "CNI-"):
			rules[f[1]] = append(rules[f[1]], line)
		}
	}
	var chains []string
	for chain, rs := range rules {
		if len(rs) == 0 || slices.ContainsFunc(rs, func(r string) bool { return strings.Contains(r, network) }) {
			chains = append(chains, chain)
		}
	}
	slices.Sort(chains)
	return chains
}

// Clean undoes on the host what a node in dir, with its binaries in bin,
// left when it was killed without its Stop: what Stop undoes, so that a
// new node can start in dir. It is safe when no node ran.
func Clean(dir, bin string) error {
	killNaming(dir)
	cleanHost(dir, bin)
	unmountUnder(dir)
	return restoreHost(dir)
}

// cleanHost is Node.cleanHost for the node in dir with its binaries in
// bin: also the pods' cgroups, the killed shims' sockets and runc's state
// of their containers.
func cleanHost(dir, bin string) {
	killPods()
	removePodNetns()
	if proxy := filepath.Join(bin, "kube-proxy"); fileExists(proxy) {
		_ = exec.Command(proxy, "--cleanup").Run() // best effort: its chains may be gone
	}
	removeKubeletChains()
	removePodMasquerade()
	removeCNIChains()
	unguardServices()
	removeContainerLogLinks(dir)
	_ = exec.Command("ip", "link", "delete", bridge).Run() // best effort
	// Killed processes leave their cgroups a moment later.
	for deadline := time.Now().Add(5 * time.Second); len(podCgroups()) > 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		removePodCgroups()
	}
	removeStale(staleShimSockets())
	removeStale(staleRuncState())
}
