package kubenode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

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
