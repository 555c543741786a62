//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// outcome is what one scenario run showed.
type outcome struct {
	name                        string
	attempts, ok, fail, unknown int
	acquire                     []time.Duration // latency of granted acquisitions
	store                       storeTotals
	fenceErrors                 []string
	overlaps                    int
	overlapMax                  time.Duration
	// concurrency is, per semaphore, the most holders that believed they
	// held it at once.
	concurrency   map[string]int
	porcupine     string
	porcupineTime time.Duration
	gaps          []time.Duration // reacquire after a fault
	leads         []time.Duration // new grant − old holder told lost
	keys, leases  int64
	notes         []string
	reasons       map[string]int // why acquisitions failed
	losses        map[string]int // how holders learned they lost
	took          time.Duration
}

func (o *outcome) note(format string, args ...any) {
	o.notes = append(o.notes, fmt.Sprintf(format, args...))
}

// analyze checks a history against the store's log: counts, the fence
// invariant and belief overlaps.
func analyze(name string, ops []histOp, st *store) *outcome {
	o := &outcome{name: name, store: st.totals(), reasons: map[string]int{}, losses: map[string]int{}}
	type grant struct {
		owner string
		start time.Duration
	}
	grants := map[string]map[int64]*grant{} // lock → fence → grant
	type hold struct {
		lock, owner string
		fence       int64
		start, end  time.Duration
		reader      bool
	}
	var holds []hold
	open := map[string]int{} // owner+fence → index in holds
	limits, readers := map[string]int{}, map[string]bool{}
	for _, op := range ops {
		if op.Kind == opAcquire && op.Limit > 1 {
			limits[op.Lock] = op.Limit
		}
		if op.Kind == opAcquire && op.Mode == "read" {
			readers[op.Lock] = true
		}
	}
	for _, op := range ops {
		if op.Kind != opAcquire {
			// A holder acts from its grant until it asks to release or is
			// told it lost the lock (Jepsen's interval): a release in
			// flight may let the next holder in before its answer arrives.
			if i, ok := open[holdKey(op)]; ok {
				holds[i].end = min(holds[i].end, op.Told)
				delete(open, holdKey(op))
			}
			continue
		}
		o.attempts++
		switch op.Result {
		case resOK:
			o.ok++
			o.acquire = append(o.acquire, op.Return-op.Call)
			if grants[op.Lock] == nil {
				grants[op.Lock] = map[int64]*grant{}
			}
			if g, dup := grants[op.Lock][op.Fence]; dup && g.owner != op.Owner {
				// (The same owner asking again is answered with its grant.)
				o.fenceErrors = append(o.fenceErrors, fmt.Sprintf("%s: fence %d granted to %s and to %s", op.Lock, op.Fence, g.owner, op.Owner))
			}
			grants[op.Lock][op.Fence] = &grant{owner: op.Owner, start: op.Return}
			open[holdKey(op)] = len(holds)
			holds = append(holds, hold{op.Lock, op.Owner, op.Fence, op.Return, never, op.Mode == "read"})
		case resFail:
			o.fail++
			o.reasons[op.Detail]++
		default:
			o.unknown++
			o.reasons[op.Detail]++
		}
	}
	for _, op := range ops {
		if op.Kind == opLoss {
			o.losses[op.Detail]++
		}
	}

	// Fence invariant over the store's log.
	last := map[string]int64{}
	for _, s := range st.snapshot() {
		if !s.Accepted {
			continue
		}
		g := grants[s.Lock][s.Token]
		switch {
		case g == nil:
			o.fenceErrors = append(o.fenceErrors, fmt.Sprintf("%s: store accepted fence %d that no sidecar granted", s.Lock, s.Token))
		case g.owner != s.Holder:
			o.fenceErrors = append(o.fenceErrors, fmt.Sprintf("%s: fence %d granted to %s but used by %s", s.Lock, s.Token, g.owner, s.Holder))
		}
		if st.fenced && s.Token < last[s.Lock] {
			o.fenceErrors = append(o.fenceErrors, fmt.Sprintf("%s: store accepted fence %d after %d", s.Lock, s.Token, last[s.Lock]))
		}
		last[s.Lock] = max(last[s.Lock], s.Token)
	}
	// Belief overlap: two holders of one lock who both thought they held
	// it; of a semaphore, more holders than its units; of a read/write
	// lock, a writer with anyone.
	sort.Slice(holds, func(i, j int) bool { return holds[i].start < holds[j].start })
	o.concurrency = map[string]int{}
	for i := range holds {
		if readers[holds[i].lock] {
			active, writers := 1, 0
			if !holds[i].reader {
				writers++
			}
			for j := range i {
				if holds[j].lock == holds[i].lock && holds[j].end > holds[i].start {
					active++
					if !holds[j].reader {
						writers++
					}
				}
			}
			o.concurrency[holds[i].lock] = max(o.concurrency[holds[i].lock], active)
			if writers > 0 && active > 1 {
				o.overlaps++
			}
			continue
		}
		if n := limits[holds[i].lock]; n > 1 {
			active := 1
			for j := range i {
				if holds[j].lock == holds[i].lock && holds[j].end > holds[i].start {
					active++
				}
			}
			o.concurrency[holds[i].lock] = max(o.concurrency[holds[i].lock], active)
			if active > n {
				o.overlaps++
			}
			continue
		}
		for j := i + 1; j < len(holds) && holds[j].start < holds[i].end; j++ {
			if holds[j].lock != holds[i].lock || (holds[j].fence == holds[i].fence && holds[j].owner == holds[i].owner) {
				continue
			}
			o.overlaps++
			o.overlapMax = max(o.overlapMax, min(holds[i].end, holds[j].end)-holds[j].start)
		}
	}
	return o
}

// Porcupine: a mutex with an owner, one partition per lock. The state is the
// owning client, -1 when free.
type mutexInput struct {
	kind   string
	client int
	lock   string
}

var mutexModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var locks []string
		for _, op := range h {
			l := op.Input.(mutexInput).lock
			if _, seen := by[l]; !seen {
				locks = append(locks, l)
			}
			by[l] = append(by[l], op)
		}
		var out [][]porcupine.Operation
		for _, l := range locks {
			out = append(out, by[l])
		}
		return out
	},
	Init: func() []any { return []any{-1} },
	Step: func(state, input, output any) []any {
		s, in, res := state.(int), input.(mutexInput), output.(string)
		switch in.kind {
		case opAcquire:
			switch res {
			case resOK: // free, or an owner's repeated acquire (idempotent)
				if s == -1 || s == in.client {
					return []any{in.client}
				}
				return nil
			case resFail:
				return []any{s}
			default: // unknown: it may have taken the lock
				if s == -1 {
					return []any{s, in.client}
				}
				return []any{s}
			}
		default: // release or loss: only the owner gives the lock up
			if s != in.client {
				if res == resUnknown {
					return []any{s}
				}
				return nil
			}
			if res == resUnknown {
				return []any{s, -1}
			}
			return []any{-1}
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(mutexInput)
		return fmt.Sprintf("%s(%s, c%d) -> %s", in.kind, in.lock, in.client, output)
	},
	DescribeState: func(state any) string {
		if s := state.(int); s >= 0 {
			return fmt.Sprintf("held by c%d", s)
		}
		return "free"
	},
}

// checkLinearizable runs porcupine over the history; on a failure it
// saves the visualization in dir.
func checkLinearizable(o *outcome, ops []histOp, dir string) {
	var hist []porcupine.Operation
	semaphores := map[string]bool{} // and read/write locks: their holders overlap
	for _, op := range ops {
		if op.Limit > 1 || op.Mode == "read" {
			semaphores[op.Lock] = true
		}
	}
	for _, op := range ops {
		if semaphores[op.Lock] {
			continue // the model is a mutex's
		}
		hist = append(hist, porcupine.Operation{
			ClientId: op.Client,
			Input:    mutexInput{kind: op.Kind, client: op.Client, lock: op.Lock},
			Call:     int64(op.Call),
			Output:   op.Result,
			Return:   int64(op.Return),
		})
	}
	model := mutexModel.ToModel()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, hist, 60*time.Second)
	o.porcupineTime = time.Since(start)
	o.porcupine = string(res)
	if res != porcupine.Ok && dir != "" {
		path := filepath.Join(dir, "history-"+strings.ToLower(strings.Fields(o.name)[0])+".html")
		if err := porcupine.VisualizePath(model, info, path); err == nil {
			o.note("porcupine history saved to %s", path)
		}
	}
}

// artifactDir is where failed histories go: BATON_E2E_ARTIFACTS or the
// system's temporary directory.
func artifactDir() string {
	if d := os.Getenv("BATON_E2E_ARTIFACTS"); d != "" {
		os.MkdirAll(d, 0o755)
		return d
	}
	return os.TempDir()
}

// reacquireGaps measures, for each fault at time f on lock, how long until
// the next grant of lock to anyone.
func reacquireGaps(ops []histOp, lock string, faults []time.Duration) []time.Duration {
	var grants []time.Duration
	for _, op := range ops {
		if op.Kind == opAcquire && op.Result == resOK && op.Lock == lock {
			grants = append(grants, op.Return)
		}
	}
	slices.Sort(grants)
	var gaps []time.Duration
	for _, f := range faults {
		i, _ := slices.BinarySearch(grants, f)
		if i < len(grants) {
			gaps = append(gaps, grants[i]-f)
		}
	}
	return gaps
}

// detectionLeads: for each holder told "lost" by its sidecar, the time from
// that notice to the next grant of its lock to a newer fence. Negative
// would mean a window in which two holders believed they held the lock.
func detectionLeads(ops []histOp) []time.Duration {
	var leads []time.Duration
	for _, l := range ops {
		if l.Kind != opLoss || l.Return == never || l.Call != l.Return {
			continue // not a loss notice of the sidecar
		}
		next := never
		for _, g := range ops {
			if g.Kind == opAcquire && g.Result == resOK && g.Lock == l.Lock && g.Fence > l.Fence && g.Return < next {
				next = g.Return
			}
		}
		if next != never {
			leads = append(leads, next-l.Call)
		}
	}
	return leads
}

// leftovers counts the keys under the suite's scope and the leases etcd
// still has, waiting up to wait for crashed sidecars' leases to expire.
func leftovers(t *testing.T, cli *clientv3.Client, wait time.Duration) (keys, leases int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := cli.Get(ctx, "/baton/v1/e2e/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		var ls *clientv3.LeaseLeasesResponse
		if err == nil {
			ls, err = cli.Leases(ctx)
		}
		cancel()
		if err != nil {
			t.Fatalf("count leftovers: %v", err)
		}
		keys, leases = r.Count, int64(len(ls.Leases))
		if (keys == 0 && leases == 0) || time.Now().After(deadline) {
			return keys, leases
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requirements say which checks must pass in a scenario.
type requirements struct {
	linearizable bool // porcupine must answer Ok (fault-free runs)
	noOverlap    bool // no two holders' beliefs may overlap
	minOK        int  // at least this many grants: the run did something
}

// require fails t on a broken invariant. The fence and lost-update
// invariants are required in every scenario.
func (o *outcome) require(t *testing.T, r requirements) {
	t.Helper()
	for _, e := range o.fenceErrors {
		t.Errorf("fence invariant: %s", e)
	}
	if o.store.staleAccepted != 0 {
		t.Errorf("stale writes accepted: %d", o.store.staleAccepted)
	}
	if o.store.lostUpdates != 0 {
		t.Errorf("lost updates: %d (store counter %d, acknowledged increments %d)", o.store.lostUpdates, o.store.final, o.store.acked)
	}
	if o.keys != 0 || o.leases != 0 {
		t.Errorf("left over: %d keys, %d leases", o.keys, o.leases)
	}
	if r.linearizable && o.porcupine != string(porcupine.Ok) {
		t.Errorf("porcupine: %s, want Ok; %v", o.porcupine, o.notes)
	}
	if r.noOverlap && o.overlaps != 0 {
		t.Errorf("%d belief overlaps, longest %v", o.overlaps, o.overlapMax)
	}
	if o.ok < r.minOK {
		t.Errorf("only %d grants, want at least %d: the scenario did not exercise the lock", o.ok, r.minOK)
	}
}

func withPrefixCount() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}

func holdKey(op histOp) string { return fmt.Sprintf("%s\x00%s\x00%d", op.Lock, op.Owner, op.Fence) }
