package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// rounds is a series of three rounds of ops operations a second, each of
// latency lat and of cpu sidecar CPU per operation.
func rounds(ops int, lat, cpu time.Duration) series {
	s := sample{ops: ops, took: time.Second, cpu: cpuSplit{etcd: cpu, sidecars: cpu * time.Duration(ops), clients: cpu}}
	for range ops {
		s.lat = append(s.lat, lat)
	}
	return series{s, s, s}
}

// allMet is a run of every step whose figures meet every goal.
func allMet() *results {
	at := func(one, many series) map[int]series { return map[int]series{1: one, 16: one, 64: many} }
	ms := time.Millisecond
	r := &results{
		cycles: map[string]map[int]series{
			raw:            at(rounds(100, ms, 100*time.Microsecond), rounds(1000, ms, 100*time.Microsecond)),
			baton:          at(rounds(90, 11*ms/10, 110*time.Microsecond), rounds(900, ms, 110*time.Microsecond)),
			bareName:       at(rounds(95, 105*ms/100, 100*time.Microsecond), rounds(950, ms, 100*time.Microsecond)),
			bareShapedName: at(rounds(95, 105*ms/100, 105*time.Microsecond), rounds(950, ms, 105*time.Microsecond)),
		},
		refusals: map[string]series{baton: rounds(3000, ms, time.Microsecond), mutex: rounds(900, ms, time.Microsecond)},
		entries:  map[string][]float64{baton: {0, 0, 0}},
		handoff: map[string]series{
			"Baton try loop": rounds(200, ms, time.Microsecond), "Mutex TryLock loop": rounds(100, ms, time.Microsecond),
			"Baton blocking wait": rounds(400, ms, time.Microsecond), "Mutex.Lock": rounds(150, ms, time.Microsecond),
		},
		shared: map[string]series{
			semWait: rounds(500, ms, 100*time.Microsecond), mutexWait: rounds(450, ms, 100*time.Microsecond),
			semTry: rounds(300, ms, time.Microsecond), semFull: rounds(3000, ms, time.Microsecond), rwHeld: rounds(3000, ms, time.Microsecond),
		},
		sharedEntries: map[string][]float64{semFull: {0}, rwHeld: {0}},
		scale:         []scaleResult{{n: 10000, rate: 5000, rss: 100 << 20, released: time.Second, worstWrite: 50 * ms}},
		footprint:     []footprintResult{{name: leanName, size: 30e6, rss: 15 << 20}, {name: "full", size: 60e6, rss: 40 << 20}},
		scaleOut: []scaleOutResult{
			{n: 10, cycles: 1000, etcdCPU: time.Second, events: 1500, lat: []time.Duration{ms}, handOff: []time.Duration{ms}, took: time.Second},
			{n: 1000, cycles: 1000, etcdCPU: 12 * time.Second / 10, events: 1800, lat: []time.Duration{ms}, handOff: []time.Duration{ms}, took: time.Second},
			{n: 1000, proxies: 10, cycles: 1000, streams: etcdStreams{watch: 20, watchers: 1000, keepAlive: 10}, took: time.Second},
		},
		crashTTL: 2 * time.Second,
		crash:    []time.Duration{2100 * ms, 2200 * ms},
	}
	return r
}

// TestEveryGoalIsMet: the figures of allMet meet every goal, and the
// report says so.
func TestEveryGoalIsMet(t *testing.T) {
	var b bytes.Buffer
	allMet().printGoals(&b)
	out := b.String()
	if strings.Contains(out, "MISSED") || !strings.Contains(out, "bench: 21 of 21 goals met") {
		t.Fatalf("a run meeting every goal reported:\n%s", out)
	}
}

// TestEveryGoalCanBeMissed: for every goal, a run that misses it (a
// figure beyond the goal, or one that could not be measured) reports it
// MISSED; and every goal has such a case here.
func TestEveryGoalCanBeMissed(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		goal string // the start of the goal's line
		miss func(r *results)
	}{
		{"slow cycle", "Baton cycle at C=1", func(r *results) { r.cycles[baton][1] = rounds(50, 2*ms, 110*time.Microsecond) }},
		{"cycle not run", "Baton cycle at C=1", func(r *results) { r.cycles[baton][1] = nil }},
		{"low throughput", "Baton throughput at C=64", func(r *results) { r.cycles[baton][64] = rounds(500, ms, 0) }},
		{"raw not run", "Baton throughput at C=64", func(r *results) { r.cycles[raw][64] = nil }},
		{"sidecar CPU", "sidecar CPU per cycle", func(r *results) { r.cycles[baton][1] = rounds(90, ms, 200*time.Microsecond) }},
		{"sidecar CPU unread", "sidecar CPU per cycle", func(r *results) { r.cycles[bareName][1] = rounds(90, ms, 0) }},
		{"few refusals", "Baton refusals/s", func(r *results) { r.refusals[baton] = rounds(2000, ms, 0) }},
		{"mutex refusals unread", "Baton refusals/s", func(r *results) { r.refusals[mutex] = nil }},
		{"writes on refusal", "Baton writes", func(r *results) { r.entries[baton] = []float64{1, 1, 1} }},
		{"refusal entries unread", "Baton writes", func(r *results) { r.entries[baton] = nil }},
		{"livelock", "16 clients on one key", func(r *results) { r.handoff["Baton try loop"] = rounds(10, ms, 0) }},
		{"slow hand-off", "hot-key hand-off", func(r *results) { r.handoff["Baton blocking wait"] = rounds(200, ms, 0) }},
		{"Mutex.Lock unread", "hot-key hand-off", func(r *results) { r.handoff["Mutex.Lock"] = nil }},
		{"slow semaphore", "a semaphore of 4 with 16 blocking", func(r *results) { r.shared[semWait] = rounds(300, ms, 100*time.Microsecond) }},
		{"costly semaphore", "a semaphore of 4 with 16 blocking", func(r *results) { r.shared[semWait] = rounds(500, ms, 130*time.Microsecond) }},
		{"semaphore livelock", "a semaphore of 4 with 16 contenders trying", func(r *results) { r.shared[semTry] = rounds(50, ms, 0) }},
		{"full semaphore writes", "refusal: full semaphore", func(r *results) { r.sharedEntries[semFull] = []float64{0.5} }},
		{"reader refusal unread", "refusal: reader", func(r *results) { r.sharedEntries[rwHeld] = nil }},
		{"fat sidecar", "10000 held locks: sidecar RSS", func(r *results) { r.scale[0].rss = 200 << 20 }},
		{"slow release", "10000 held locks: all released", func(r *results) { r.scale[0].released = 2 * time.Second }},
		{"release unread", "10000 held locks: all released", func(r *results) { r.scale[0].released = 0 }},
		{"slow write", "10000 held locks: slowest etcd write", func(r *results) { r.scale[0].worstWrite = 150 * ms }},
		{"fat idle sidecar", "an idle sidecar in a pod", func(r *results) { r.footprint[0].rss = 25 << 20 }},
		{"idle RSS unread", "an idle sidecar in a pod", func(r *results) { r.footprint[0].rss = 0 }},
		{"etcd CPU grows", "etcd CPU per lock operation", func(r *results) { r.scaleOut[1].etcdCPU = 2 * time.Second }},
		{"events per op", "watch events per lock operation", func(r *results) { r.scaleOut[1].events = 5000 }},
		{"events unread", "watch events per lock operation", func(r *results) { r.scaleOut[1].events = -1 }},
		{"grant p99 grows", "grant p99", func(r *results) { r.scaleOut[1].lat = []time.Duration{3 * ms} }},
		{"hand-off p99 grows", "hand-off p99", func(r *results) { r.scaleOut[1].handOff = []time.Duration{3 * ms} }},
		{"hand-off p99 unread", "hand-off p99", func(r *results) { r.scaleOut[0].handOff = nil }},
		{"proxy streams", "1000 sidecars through 10", func(r *results) { r.scaleOut[2].streams.keepAlive = 40 }},
		// The figure that made this test: a count of open streams read
		// as a difference came out negative and was taken for "at most one".
		{"negative streams", "1000 sidecars through 10", func(r *results) { r.scaleOut[2].streams.keepAlive = -34 }},
		{"streams unread", "1000 sidecars through 10", func(r *results) {
			r.scaleOut[2].streams = etcdStreams{}.minus(etcdStreams{watch: -1, watchers: -1, keepAlive: -1})
		}},
		{"slow crash release", "crash release", func(r *results) { r.crash = append(r.crash, 3*time.Second) }},
		{"crash not measured", "crash release", func(r *results) { r.crash = nil }},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := allMet()
			tc.miss(r)
			var found bool
			for _, v := range r.goals() {
				if strings.HasPrefix(v.text, tc.goal) {
					found = true
					if v.met {
						t.Errorf("goal reported met: %s", v)
					}
				}
			}
			if !found {
				t.Errorf("no goal line starts with %q", tc.goal)
			}
		})
		covered[tc.goal] = true
	}
	for _, v := range allMet().goals() {
		if !v.goal {
			continue
		}
		ok := false
		for prefix := range covered {
			ok = ok || strings.HasPrefix(v.text, prefix)
		}
		if !ok {
			t.Errorf("no case here shows that this goal can be MISSED: %s", v)
		}
	}
}

// TestUnmeasuredFigures: a count, ratio or duration that came out
// negative, NaN or infinite is named as not measured.
func TestUnmeasuredFigures(t *testing.T) {
	for _, tc := range []struct {
		args []any
		bad  bool
	}{
		{[]any{1.5, 0.0, 3, time.Second, "x"}, false},
		{[]any{-34.0}, true},
		{[]any{ratio(1, 0)}, true},
		{[]any{ratio(0, 1)}, true},
		{[]any{median(nil)}, true},
		{[]any{-time.Millisecond}, true},
		{[]any{-1}, true},
	} {
		if got := unmeasured(tc.args) != ""; got != tc.bad {
			t.Errorf("unmeasured(%v) = %v, want %v", tc.args, got, tc.bad)
		}
	}
}

// TestAgainstNotes: a run with an -against build states that build's
// figures beside this one's, as notes that no goal counts, and a run
// without one states none.
func TestAgainstNotes(t *testing.T) {
	ms := time.Millisecond
	r := allMet()
	if n := againstLines(r); n != 0 {
		t.Fatalf("%d -against lines without an -against build", n)
	}
	r.cycles[batonAgainst] = map[int]series{1: rounds(80, 12*ms/10, 130*time.Microsecond), 64: rounds(800, ms, 130*time.Microsecond)}
	r.refusals[batonAgainst] = rounds(2700, ms, time.Microsecond)
	var lines []string
	for _, v := range r.goals() {
		if strings.HasPrefix(v.text, "the -against build") {
			if v.goal {
				t.Errorf("a goal: %s", v)
			}
			lines = append(lines, v.text)
		}
	}
	want := []string{
		"the -against build: cycle at C=1 1.20× raw Txn's (this build: 1.10×), throughput at C=64 0.80× (this build: 0.90×)",
		"the -against build: sidecar CPU per cycle at C=1 1.30× the bare sidecar's, 130 µs (this build: 1.10×, 110 µs)",
		"the -against build: refusals/s 3.00× Mutex TryLock's, 2700/s (this build: 3.33×, 3000/s)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// againstLines counts the goal lines that speak of an -against build.
func againstLines(r *results) int {
	n := 0
	for _, v := range r.goals() {
		if strings.Contains(v.text, "-against") {
			n++
		}
	}
	return n
}
