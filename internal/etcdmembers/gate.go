package etcdmembers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The contract between the gate, the keeper and the chart.
const (
	// StateAnnotation, on a member's pod, is the keeper's verdict for a
	// member without data: StateNew or StateExisting. The etcd container
	// reads it into ETCD_INITIAL_CLUSTER_STATE (empty, etcd's default,
	// when the member has data: etcd then ignores it).
	StateAnnotation = "baton.dev/etcd-initial-state"
	// ClusterAnnotation, with StateAnnotation, is the member's
	// --initial-cluster (name=peer URL, comma-separated), read into
	// ETCD_INITIAL_CLUSTER: every member for a new cluster, etcd's members
	// with the member added back for one that joins (etcd refuses a join
	// whose list is not its own).
	ClusterAnnotation = "baton.dev/etcd-initial-cluster"
	// GateContainer is the name of the member pod's init container that
	// runs Gate: the keeper finds a member waiting for its verdict by it.
	GateContainer = "etcd-gate"
	// FoundingAnnotation marks the member pods told StateNew by one
	// founding, until etcd has a quorum: a founding cut short (the
	// keeper's leader gone half-way) is taken up again.
	FoundingAnnotation = "baton.dev/etcd-founding"
	// StateNew founds a new cluster with every member of --initial-cluster.
	StateNew = "new"
	// StateExisting joins the running cluster, which the member was added
	// to.
	StateExisting = "existing"
)

// HasData reports whether etcd's data directory holds a member's data: a
// write-ahead log file, as etcd itself decides whether it restarts.
func HasData(dataDir string) (bool, error) {
	files, err := filepath.Glob(filepath.Join(dataDir, "member", "wal", "*.wal"))
	if err != nil {
		return false, err
	}
	return len(files) > 0, nil
}

// ReadState reads StateAnnotation from a file of the pod's annotations
// that Kubernetes' downward API writes (key="quoted value", one a line):
// "" while it is not there.
func ReadState(annotations string) (string, error) {
	b, err := os.ReadFile(annotations)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		key, quoted, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if !ok || key != StateAnnotation {
			continue
		}
		v, err := strconv.Unquote(quoted)
		if err != nil {
			return "", fmt.Errorf("%s in %s: %q is not a quoted string: %w", StateAnnotation, annotations, quoted, err)
		}
		return v, nil
	}
	return "", nil
}

// Gate returns once etcd may start: at once when dataDir holds a member's
// data (the state is then ""), else when the pod's annotations (the
// downward API's file) carry the keeper's verdict, which it returns. It
// looks every poll, and says what it waits for every minute.
func Gate(ctx context.Context, dataDir, annotations string, poll time.Duration, log *slog.Logger) (string, error) {
	has, err := HasData(dataDir)
	if err != nil {
		return "", fmt.Errorf("etcd's data directory %s: %w", dataDir, err)
	}
	if has {
		log.Info("etcd's data is here: it restarts as the member it was", "dataDir", dataDir)
		return "", nil
	}
	log.Info("no etcd data here: waiting for the controller to say whether this member founds the cluster or joins it", "dataDir", dataDir, "annotation", StateAnnotation)
	said := time.Now()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		state, err := ReadState(annotations)
		switch {
		case err != nil:
			log.Warn("cannot read the pod's annotations", "err", err)
		case state == StateNew || state == StateExisting:
			log.Info("the controller's verdict", "state", state)
			return state, nil
		case state != "":
			log.Warn("ignoring an annotation that is neither new nor existing", "annotation", StateAnnotation, "value", state)
		}
		if time.Since(said) >= time.Minute {
			log.Info("still waiting for the controller's verdict: is Baton's controller running, and its leader elected? Its log says why it gives none", "annotation", StateAnnotation)
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
	}
}
