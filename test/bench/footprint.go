package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// footprintResult is one build's size and the RSS of an idle sidecar of it.
type footprintResult struct {
	name string
	size int64 // bytes of the binary
	rss  int64 // after its start and one acquire + release, then idleFor
}

// idleFor is how long a footprint sidecar sits idle before its RSS is read.
const idleFor = 3 * time.Second

// leanName is the footprint row of the sidecar that runs in pods.
const leanName = "baton-sidecar (lean build, in pods), external etcd"

// daprName is the footprint row of the sidecar of pods that speak Dapr.
const daprName = "baton-dapr (lean build with Dapr's lock API on, in pods annotated baton.dev/dapr), external etcd"

// footprint: what one sidecar costs a pod, the lean build beside the full
// one, each on the bench's etcd, and the full one with its embedded etcd
// (the one-command local mode).
func (w *world) footprint(ctx context.Context, r *results) error {
	extern := func(name string) []string {
		return []string{"--socket", filepath.Join(w.dir, name+".sock"), "--etcd-endpoints", w.etcd.endpoint}
	}
	runs := []struct {
		name, bin string
		args      []string
	}{
		{leanName, w.o.sidecar, extern("fp-lean")},
		{"baton (full build), external etcd", w.o.baton, extern("fp-full")},
		{"baton (full build), embedded etcd", w.o.baton, []string{"--socket", filepath.Join(w.dir, "fp-embedded.sock"),
			"--data-dir", filepath.Join(w.dir, "fp-embedded"), "--embedded-client-url", "unix://" + filepath.Join(w.dir, "fp-etcd.sock")}},
	}
	if w.o.daprSidecar != "" {
		runs = append(runs, struct {
			name, bin string
			args      []string
		}{daprName, w.o.daprSidecar, append(extern("fp-dapr"), "--dapr-http-addr", "127.0.0.1:0", "--dapr-grpc-addr", "unix://"+filepath.Join(w.dir, "fp-dapr-grpc.sock"))})
	}
	for _, run := range runs {
		fi, err := os.Stat(run.bin)
		if err != nil {
			return err
		}
		args := append([]string{"serve", "--scope", "bench-footprint", "--health-addr", "", "--log-level", "error"}, run.args...)
		p, err := startProc(exec.Command(run.bin, args...), "serving on")
		if err != nil {
			return err
		}
		s := newSidecar(p, run.args[1]) // the socket
		// One cycle first: an idle sidecar is one that has served.
		err = s.call(ctx, "POST", "/v1/locks/footprint", `{"owner":"bench"}`, 200)
		if err == nil {
			err = s.call(ctx, "DELETE", "/v1/locks/footprint?owner=bench", "", 200)
		}
		if err == nil {
			time.Sleep(idleFor)
			r.footprint = append(r.footprint, footprintResult{name: run.name, size: fi.Size(), rss: p.rss()})
		}
		p.term()
		if err != nil {
			return err
		}
	}
	return nil
}
