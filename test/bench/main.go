// Command bench measures Baton side by side with raw etcd and with what
// users would pick instead (etcd's concurrency.Mutex, Redis SET NX), in one
// run, with the same keys and concurrency, the contenders interleaved so
// that machine drift hits all of them. It starts its own etcd (a child
// process, fsync on) and sidecars, prints a markdown table, one line per
// goal and `bench: N of M goals met`. Run it with `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	if dir := os.Getenv(etcdChildEnv); dir != "" {
		os.Exit(runEtcdChild(dir))
	}
	if spec := os.Getenv(memberChildEnv); spec != "" {
		os.Exit(runMemberChild(spec))
	}
	if spec := os.Getenv(proxyChildEnv); spec != "" {
		os.Exit(runProxyChild(spec))
	}
	if spec := os.Getenv(bareChildEnv); spec != "" {
		os.Exit(runBareChild(spec))
	}
	var o options
	flag.StringVar(&o.baton, "baton", "bin/baton", "the baton binary to measure")
	flag.StringVar(&o.against, "against", "", "another baton binary (the build before a change), measured beside -baton in the cycles and refusals, interleaved with it: before and after in one run")
	flag.StringVar(&o.sidecar, "sidecar", "bin/baton-sidecar", "the lean build of baton (go build -tags lean), whose footprint is measured")
	flag.StringVar(&o.daprSidecar, "dapr-sidecar", "", "the lean build with Dapr's lock API (go build -tags lean,dapr), whose footprint is measured beside it; empty: not measured")
	flag.DurationVar(&o.slice, "slice", 2*time.Second, "how long each contender runs in each round")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of interleaved runs; medians are reported")
	flag.IntVar(&o.scaleMax, "scale", 100_000, "the largest number of locks held by one sidecar")
	flag.StringVar(&o.redis, "redis-server", "redis-server", "redis-server binary; skipped when not found")
	flag.StringVar(&o.profile, "profile", "", "write a CPU profile of the sidecar during Baton's cycles at -profile-c clients to this file")
	flag.IntVar(&o.profileC, "profile-c", 64, "the client count of the cycles -profile profiles: 1, 16 or 64")
	flag.StringVar(&o.profileRefusals, "profile-refusals", "", "write a CPU profile of the refusing sidecar during Baton's refusals to this file")
	flag.StringVar(&o.heap, "heap", "", "write a heap profile of the sidecar holding the most locks (scale) to this file")
	flag.StringVar(&o.scaleArgs, "scale-args", "", "extra flags for the scale step's sidecar, space-separated (e.g. --keys-per-lease 1000000)")
	flag.StringVar(&o.scaleOut, "scale-out", "10,100,1000,1000/10", "the scale-out step's sizes: sidecar engines in one scope, each with its own etcd client and session (3000 when asked for); N/P reaches etcd through P of etcd's gRPC proxies, as one per node")
	flag.StringVar(&o.only, "only", "", "run only these steps, comma-separated: cycles, refusals, hand-off, shared, crash, failover, scale, scale-out, etcd-cluster, footprint")
	flag.Parse()
	if !slices.Contains(concurrencies, o.profileC) {
		fmt.Fprintf(os.Stderr, "bench: -profile-c %d: the cycles run at %v clients\n", o.profileC, concurrencies)
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the flags.
type options struct {
	baton           string
	against         string
	sidecar         string
	daprSidecar     string
	scaleOut        string
	slice           time.Duration
	rounds          int
	scaleMax        int
	redis           string
	profile         string
	profileC        int
	profileRefusals string
	heap            string
	only            string
	scaleArgs       string
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "bb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.baton, err = filepath.Abs(o.baton); err != nil {
		return err
	}
	if o.sidecar, err = filepath.Abs(o.sidecar); err != nil {
		return err
	}
	if o.daprSidecar != "" {
		if o.daprSidecar, err = filepath.Abs(o.daprSidecar); err != nil {
			return err
		}
	}
	et, err := startEtcd(dir)
	if err != nil {
		return err
	}
	defer et.stop()
	w := &world{o: o, dir: dir, etcd: et}
	defer w.close()
	if err := w.connect(); err != nil {
		return err
	}
	r := &results{}
	steps := []struct {
		name string
		f    func(context.Context, *results) error
	}{
		{"cycles", w.cycles},
		{"refusals", w.refusals},
		{"hand-off", w.handoff},
		{"shared", w.shared},
		{"crash", w.crash},
		{"failover", w.failover},
		{"scale", w.scale},
		{"scale-out", w.scaleOut},
		{"etcd-cluster", w.etcdCluster},
		{"footprint", w.footprint},
	}
	for _, s := range steps {
		if o.only != "" && !slices.Contains(strings.Split(o.only, ","), s.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s…\n", s.name)
		if err := s.f(ctx, r); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	r.print(os.Stdout, o)
	return nil
}
