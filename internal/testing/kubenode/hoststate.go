package kubenode

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// netnsDir is where `ip netns` and CNI libraries pin network namespaces;
// the first of them makes it a bind mount of itself.
const netnsDir = "/run/netns"

// hostState is what a node changes on the host that only its value before
// the node can put back: sysctls (the kubelet's overcommit and panic
// settings, IP forwarding, kube-proxy's route_localnet), and whether
// /run/netns was a mount.
type hostState struct {
	Sysctls      map[string]string `json:"sysctls"`
	NetnsMounted bool              `json:"netnsMounted"`
}

// hostStateFile is where a node in dir keeps the host's state from before
// it: beside dir, which a new node removes.
func hostStateFile(dir string) string { return strings.TrimRight(dir, "/") + ".host.json" }

// recordHost returns the host's state from before the node in dir. A file
// left by a node that was killed without its Stop holds the host as it was
// before that node, which is what the host must get back; otherwise the
// state now is written there.
func recordHost(dir string) (hostState, error) {
	var h hostState
	if b, err := os.ReadFile(hostStateFile(dir)); err == nil && json.Unmarshal(b, &h) == nil && h.Sysctls != nil {
		return h, nil
	}
	h = hostState{Sysctls: readSysctls(), NetnsMounted: isMount(netnsDir)}
	b, err := json.Marshal(h)
	if err != nil {
		return h, err
	}
	if err := os.MkdirAll(filepath.Dir(hostStateFile(dir)), 0o755); err != nil {
		return h, err
	}
	return h, os.WriteFile(hostStateFile(dir), b, 0o644)
}

// restoreHost puts back the host's state recorded for the node in dir,
// if any, and removes its record.
func restoreHost(dir string) error {
	b, err := os.ReadFile(hostStateFile(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var h hostState
	if err != nil || json.Unmarshal(b, &h) != nil {
		return os.Remove(hostStateFile(dir)) // unreadable: nothing to put back
	}
	restoreSysctls(h.Sysctls)
	if !h.NetnsMounted && isMount(netnsDir) {
		_ = syscall.Unmount(netnsDir, syscall.MNT_DETACH) // best effort
	}
	return os.Remove(hostStateFile(dir))
}

// isMount reports whether path is a mount point.
func isMount(path string) bool {
	for _, m := range mounts() {
		if m.point == path {
			return true
		}
	}
	return false
}
