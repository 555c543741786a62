package kubenode

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0]), "containerd-shim") &&
			strings.Contains(string(cmdline), "k8s.io") {
			pids = append(pids, pid)
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
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0 := filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0])
		if slices.Contains(ours, argv0) && strings.Contains(string(cmdline), dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // gone already is fine
		}
	}
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

// Leftovers lists what a node that kept its state in dir left on the host
// after it stopped, empty when it undid everything it changed: processes
// of its pods or naming dir, mounts under dir or of pods' network
// namespaces, iptables chains of Kubernetes, CNI or its own, the pods'
// bridge, the CNI plugins' cached results, the kubelet's links to
// container logs, the pods' cgroups, the sockets of containerd's killed
// shims, runc's state of containers gone. It does not look at sysctls (see
// HostSettings): only their values before the node say what they should
// be.
func Leftovers(dir string) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		// The state follows the command's name in parentheses, which may
		// hold any character.
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		i := strings.LastIndex(string(stat), ") ")
		if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
			continue // gone, or dead and waiting for its parent to reap it
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cgroup, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "); strings.Contains(args, dir) || strings.Contains(string(cgroup), "/kubepods") {
			left = append(left, "process "+e.Name()+": "+args)
		}
	}
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") || m.podNetns() {
			left = append(left, "mount "+m.point+" ("+m.fstype+")")
		}
	}
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, _ := exec.Command("iptables", "-t", table, "-S").Output()
		for _, rule := range strings.Split(string(out), "\n") {
			if f := strings.Fields(rule); len(f) == 2 && f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || strings.HasPrefix(f[1], "CNI-") || f[1] == guardChain) {
				left = append(left, "iptables chain "+table+" "+f[1])
			}
		}
	}
	if err := exec.Command("ip", "link", "show", bridge).Run(); err == nil {
		left = append(left, "link "+bridge)
	}
	for _, r := range cniResults() {
		left = append(left, "CNI result "+r)
	}
	for _, l := range containerLogs(dir) {
		left = append(left, "container log link "+l)
	}
	for _, d := range podCgroups() {
		left = append(left, "cgroup "+d)
	}
	for _, s := range staleShimSockets() {
		left = append(left, "containerd shim socket "+s)
	}
	for _, s := range staleRuncState() {
		left = append(left, "runc state "+s)
	}
	if fileExists(hostStateFile(dir)) {
		left = append(left, "the host's settings not put back: "+hostStateFile(dir))
	}
	return left
}

// HostSettings reads the host settings a node changes (the kubelet's
// overcommit and panic settings, IP forwarding, kube-proxy's
// route_localnet, whether /run/netns is a mount), for a caller to compare
// before and after a node.
func HostSettings() map[string]string {
	m := readSysctls()
	m["mount "+netnsDir] = strconv.FormatBool(isMount(netnsDir))
	return m
}

// podCgroups lists the kubepods cgroups of every hierarchy (cgroup v1's
// controllers, and v2's unified one), the deepest first.
func podCgroups() []string {
	var dirs []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fileExists("/sys/fs/cgroup/kubepods") {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// removePodCgroups removes the kubepods cgroups once their processes are
// gone: a cgroup is a directory that rmdir removes when empty.
func removePodCgroups() {
	for _, d := range podCgroups() {
		_ = syscall.Rmdir(d) // best effort: busy until its processes exit
	}
}

// shimDir is where containerd's shims listen, whatever its state
// directory.
const shimDir = "/run/containerd/s"

// staleShimSockets lists the sockets in shimDir that nothing listens on:
// those of shims that were killed.
func staleShimSockets() []string {
	listening := map[string]bool{}
	if b, err := os.ReadFile("/proc/net/unix"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 8 {
				listening[f[7]] = true
			}
		}
	}
	entries, _ := os.ReadDir(shimDir)
	var stale []string
	for _, e := range entries {
		path := filepath.Join(shimDir, e.Name())
		if e.Type()&os.ModeSocket != 0 && !listening[path] {
			stale = append(stale, path)
		}
	}
	return stale
}

// runcStateRoot is runc's state of containerd's k8s.io containers when no
// root is configured (nodes before the one that keeps it under its state
// directory).
const runcStateRoot = "/run/containerd/runc/k8s.io"

// staleRuncState lists runc's state directories of k8s.io containers
// whose process is gone.
func staleRuncState() []string {
	entries, _ := os.ReadDir(runcStateRoot)
	var stale []string
	for _, e := range entries {
		path := filepath.Join(runcStateRoot, e.Name())
		var st struct {
			Pid int `json:"init_process_pid"`
		}
		b, err := os.ReadFile(filepath.Join(path, "state.json"))
		if err == nil && json.Unmarshal(b, &st) == nil && st.Pid > 0 && syscall.Kill(st.Pid, 0) == nil {
			continue // its container still runs
		}
		stale = append(stale, path)
	}
	return stale
}

// removeStale removes paths (files or directories).
func removeStale(paths []string) {
	for _, p := range paths {
		_ = os.RemoveAll(p) // best effort
	}
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
