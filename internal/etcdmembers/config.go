// Package etcdmembers keeps the membership of the chart's etcd, whose
// members are the pods of a StatefulSet, so that a member that lost its
// data comes back without an operator's hands.
//
// etcd decides how a member starts from its data directory: with data, it
// restarts as the member it was, whatever its flags say; without, it must
// be told whether it founds a new cluster (--initial-cluster-state=new)
// or joins one that runs (existing), and a member that joins must first
// have been added to the cluster. The wrong answer is fatal: a member that
// lost its volume and founds the cluster again under its old name is
// refused by its peers, or panics when the leader's log is ahead of its
// empty one. So every member pod starts behind a gate (Gate, an init
// container without credentials): with data it passes at once; without,
// it waits until its pod carries StateAnnotation, which its etcd container
// reads into ETCD_INITIAL_CLUSTER_STATE. The controller's leader (Keeper),
// etcd's root user, gives the verdict:
//   - every member pod waits at the gate and etcd has no quorum: a new
//     cluster (a first install, or every volume lost), "new" for all;
//   - etcd answers with a quorum: the waiting member lost its data. Once
//     every other member is started and answers, its old entry is removed,
//     it is added back as a learner (which counts for no quorum while it
//     catches up), its pod is told "existing", and it is promoted to a
//     voting member once it has caught up with the leader. One member at a
//     time;
//   - some member pods run etcd, or have data, and etcd has no quorum:
//     nothing is changed (a new cluster beside the data of the old would
//     lose every lock and reuse fences). The log says to restore from a
//     backup (docs/operations.md).
package etcdmembers

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/config"
)

// Peer is one member, as etcd's --initial-cluster names it: its pod's name
// and its peer URL.
type Peer struct {
	Name string
	URL  string
}

// ParsePeers reads an --initial-cluster value: name=peerURL, comma
// separated, each name once.
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		name, raw, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || raw == "" {
			return nil, fmt.Errorf("etcd member %q: want name=peer URL, such as baton-etcd-0=https://baton-etcd-0.baton-etcd-peers.baton-system.svc:2380", item)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("etcd member %s: peer URL %q: want http:// or https:// and a host:port", name, raw)
		}
		if seen[name] {
			return nil, fmt.Errorf("etcd member %s: named twice", name)
		}
		seen[name] = true
		peers = append(peers, Peer{Name: name, URL: raw})
	}
	return peers, nil
}

// Config says which pods are etcd's members.
type Config struct {
	// Namespace holds the member pods.
	Namespace string
	// Selector is the label selector of the member pods, such as
	// app.kubernetes.io/name=baton,app.kubernetes.io/component=etcd.
	Selector string
	// Peers are the members, each a pod of the same name: etcd's
	// --initial-cluster.
	Peers []Peer
	// Interval is how often the member pods and etcd's members are looked
	// at. Default 5s.
	Interval time.Duration
	// Timeout bounds each call to etcd and to Kubernetes. Default 10s.
	Timeout time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{Interval: 5 * time.Second, Timeout: 10 * time.Second}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "":
		return config.Invalid("etcdmembers.Namespace", "namespace of etcd's member pods: required")
	case c.Selector == "":
		return config.Invalid("etcdmembers.Selector", "label selector of etcd's member pods: required")
	case len(c.Peers) == 0:
		return config.Invalid("etcdmembers.Peers", "etcd's members: give at least one name=peer URL")
	case c.Interval <= 0:
		return config.Invalid("etcdmembers.Interval", "interval %v: must be positive", c.Interval)
	case c.Timeout <= 0:
		return config.Invalid("etcdmembers.Timeout", "timeout %v: must be positive", c.Timeout)
	}
	return nil
}
