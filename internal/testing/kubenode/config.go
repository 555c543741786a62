package kubenode

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The node's address ranges and names.
const (
	// NodeName is the node's name.
	NodeName = "node1"
	// ServiceCIDR is where Services get their cluster IPs.
	ServiceCIDR = "10.96.0.0/16"
	// PodCIDR is where pods get their IPs, on the node's bridge.
	PodCIDR = "10.244.0.0/24"
	// DNSServiceIP is the cluster IP of the cluster DNS Service.
	DNSServiceIP = "10.96.0.10"
	// bridge is the CNI bridge the pods are attached to.
	bridge = "batonbr0"
	// network is the name of the pods' CNI network.
	network = "baton-node"
	// cniBinDir is where Debian's containernetworking-plugins installs.
	cniBinDir = "/usr/lib/cni"
	// cniCacheDir is where the CNI library caches each attachment's result.
	cniCacheDir = "/var/lib/cni"
)

// writeKubeconfig writes a kubeconfig for the API server at server that
// authenticates with a client certificate.
func writeKubeconfig(path, server, ca, cert, key string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["node"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: ca}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts["node"] = &clientcmdapi.Context{Cluster: "node", AuthInfo: "user"}
	cfg.CurrentContext = "node"
	return clientcmd.WriteToFile(*cfg, path)
}

// containerdConfig is containerd 1.6's configuration: its state under dir,
// the pause image given, CNI from Debian's plugins, cgroupfs. The CRI
// plugin must not lower oom_score_adj: root on these machines lacks
// CAP_SYS_RESOURCE, and without restrict_oom_score_adj every sandbox fails
// to start. The pods' network namespaces are pinned under the state
// directory, not /var/run/netns, so that Stop's unmount of dir frees them
// (and their veth pairs) even when no CNI DEL ever ran; runc keeps its
// containers' state under dir too, not in /run/containerd/runc.
func containerdConfig(dir, pauseImage string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "containerd.sock"), pauseImage, cniBinDir, filepath.Join(dir, "cni"), filepath.Join(dir, "runc"))
}

// cniConfig attaches pods to a bridge with addresses from PodCIDR, masqueraded
// to the outside, with host ports.
func cniConfig(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, network, bridge, PodCIDR, ipamDir)
}

// kubeletConfig is the kubelet's configuration: cgroups v1 through
// cgroupfs (these machines have no systemd running), the API server's
// requests authenticated by certificate and authorized by the API server,
// and pods synced every 10s rather than every minute, so that a renewed
// Secret reaches the files of the pods that mount it within seconds (the
// node tests rotate etcd's certificates every minute or so).
func kubeletConfig(runtimeSock, ca, cert, key, resolvConf, logs string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization:
  mode: Webhook
tlsCertFile: %q
tlsPrivateKeyFile: %q
resolvConf: %q
clusterDNS: [%q]
clusterDomain: cluster.local
port: 10250
readOnlyPort: 0
podLogsDir: %q
serializeImagePulls: false
syncFrequency: 10s
imageGCHighThresholdPercent: 100
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%"}
`, runtimeSock, ca, cert, key, resolvConf, DNSServiceIP, logs)
}

// writeFile writes data to path, making its directory.
func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}
