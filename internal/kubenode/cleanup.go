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
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH) // best effort
	}
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
		if !strings.HasPrefix(rule, "-A POSTROUTING ") || !strings.Contains(rule, `name: \"baton-node\"`) && !strings.Contains(rule, "name: baton-node") {
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
