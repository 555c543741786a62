package kubenode

import (
	"fmt"
	"os/exec"
	"strings"
)

// guardChain holds the node's own filter rules.
const guardChain = "BATON-NODE-SERVICES"

// guardServices rejects what pods and the host send to an address of
// ServiceCIDR that no Service holds. kube-proxy rewrites the destination
// of traffic to a live Service before the filter table sees it, so only
// the dead addresses remain: those of Services deleted, which a client
// may still have cached (a helm uninstall and install give the etcd
// Service a new address). On a cloud network such packets go nowhere and
// the client's connection fails; here they would leave through the
// host's default route, where a proxy of this machine's network accepts
// every connection and answers HTTP 404, and a gRPC client would keep
// that connection for good.
func guardServices() error {
	for _, args := range [][]string{
		{"-N", guardChain},
		{"-A", guardChain, "-d", ServiceCIDR, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-A", guardChain, "-d", ServiceCIDR, "-j", "REJECT"},
		{"-I", "FORWARD", "-j", guardChain},
		{"-I", "OUTPUT", "-j", guardChain},
	} {
		if out, err := exec.Command("iptables", append([]string{"-t", "filter"}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("kubenode: iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// unguardServices removes guardServices's rules, if any.
func unguardServices() {
	ipt := func(args ...string) { _ = exec.Command("iptables", append([]string{"-t", "filter"}, args...)...).Run() } // best effort: absent is fine
	for _, hook := range []string{"FORWARD", "OUTPUT"} {
		ipt("-D", hook, "-j", guardChain)
	}
	ipt("-F", guardChain)
	ipt("-X", guardChain)
}
