package kubenode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// What a node's pods leave in the kernel and in containerd's and runc's
// shared directories when they are killed rather than stopped.

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
