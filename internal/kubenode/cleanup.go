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

// cniResults lists the CNI plugins' cached results for the node's network.
func cniResults() []string {
	results, _ := filepath.Glob(filepath.Join(cniCacheDir, "results", network+"-*"))
	return results
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

// sysctls are the host settings the kubelet (and the pods' network) change.
var sysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

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
// container logs. It does not look at sysctls (see Sysctls): only their
// values before the node say what they should be.
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
	return left
}

// Sysctls reads the host settings a node changes (the kubelet's
// overcommit and panic settings, IP forwarding), for a caller to compare
// before and after a node.
func Sysctls() map[string]string { return readSysctls() }
