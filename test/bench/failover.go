package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batonclient "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/testing/kubetest"
)

// The failover step: the time an election is without a leader, from the
// moment the leader goes to the moment the standby is told it leads, when
// the leader resigns and when it is gone without a word (its sidecar
// SIGKILLed; client-go's elector stopped without releasing), for Baton's
// elections and for client-go's leader election on a coordination.k8s.io
// Lease, each with a lease of failoverTTL.

// failoverTTL is the lease of both: the sidecars' --lease-ttl, client-go's
// LeaseDuration.
const failoverTTL = 2 * time.Second

// The rows of the failover table.
const (
	batonResign    = "Baton: the leader resigns"
	batonKilled    = "Baton: the leader's sidecar SIGKILLed"
	clientGoResign = "client-go Lease: the leader releases"
	clientGoKilled = "client-go Lease: the leader stops renewing"
)

// failoverRounds are how many hand-overs each row measures: a resignation
// costs milliseconds, a loss a lease.
var failoverRounds = map[string]int{batonResign: 20, clientGoResign: 20, batonKilled: 3, clientGoKilled: 3}

func (w *world) failover(ctx context.Context, r *results) error {
	r.failover = map[string][]time.Duration{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // no step hangs the bench
	defer cancel()
	if err := w.batonFailover(ctx, r); err != nil {
		return err
	}
	if err := clientGoFailover(ctx, r); err != nil {
		// Baton's rows, and the steps before, are still worth printing.
		fmt.Fprintf(os.Stderr, "bench: failover: client-go's rows not measured: %v\n", err)
	}
	return nil
}

// batonFailover measures Baton's rows: campaigns on two sidecars, the
// standby told granted on its stream.
func (w *world) batonFailover(ctx context.Context, r *results) error {
	flags := []string{"--lease-ttl", failoverTTL.String(), "--request-timeout", "600ms"}
	standby, err := w.startSidecar("standby", flags...)
	if err != nil {
		return err
	}
	leaderSide, err := w.startSidecar("leader", flags...)
	if err != nil {
		return err
	}
	for i := range failoverRounds[batonResign] + failoverRounds[batonKilled] {
		killed := i >= failoverRounds[batonResign]
		if killed && i > failoverRounds[batonResign] { // a sidecar of its own each round
			if leaderSide, err = w.startSidecar(fmt.Sprintf("leader-%d", i), flags...); err != nil {
				return err
			}
		}
		row := batonResign
		if killed {
			row = batonKilled
		}
		d, err := batonHandOver(ctx, leaderSide, standby, fmt.Sprintf("failover-%d", i), killed)
		if err != nil {
			return err
		}
		r.failover[row] = append(r.failover[row], d)
	}
	return nil
}

// batonHandOver elects a leader through leaderSide, has a standby campaign
// through standby, then resigns the leader (or SIGKILLs its sidecar) and
// returns how long the standby waited to be told it leads.
func batonHandOver(ctx context.Context, leaderSide, standby *sidecar, name string, kill bool) (time.Duration, error) {
	lead, err := campaign(ctx, leaderSide.socket, name, "leader", lockapi.EventGranted)
	if err != nil {
		return 0, err
	}
	defer lead.Close()
	next, err := campaign(ctx, standby.socket, name, "standby", lockapi.EventQueued)
	if err != nil {
		return 0, err
	}
	defer next.Close()
	gone := time.Now()
	if kill {
		leaderSide.kill()
	} else if _, err := batonclient.New(leaderSide.socket).Resign(ctx, name, "leader"); err != nil {
		return 0, err
	}
	if err := until(next, name, "standby", lockapi.EventGranted); err != nil {
		return 0, err
	}
	return time.Since(gone), nil
}

// campaign campaigns as owner in election name through socket and returns
// its stream once it tells event: granted, or queued behind a leader.
func campaign(ctx context.Context, socket, name, owner, event string) (*batonclient.Stream, error) {
	st, err := batonclient.New(socket).Campaign(ctx, name, lockapi.Request{Owner: owner})
	if err != nil {
		return nil, err
	}
	if err := until(st, name, owner, event); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// until reads st up to its first line telling event.
func until(st *batonclient.Stream, name, owner, event string) error {
	for {
		ev, err := st.Next()
		if err != nil {
			return fmt.Errorf("%s's campaign in %s: %w", owner, name, err)
		}
		if ev.Event == event {
			return nil
		}
	}
}

// clientGoFailover measures client-go's rows on a kube-apiserver of its
// own (the test binaries of make test, in bin/k8s).
func clientGoFailover(ctx context.Context, r *results) error {
	klog.LogToStderr(false) // client-go's elector logs every acquisition
	klog.SetOutput(io.Discard)
	env := &envtest.Environment{}
	cfg, err := kubetest.Start(env, filepath.Join("."))
	if err != nil {
		return fmt.Errorf("client-go's leader election needs a kube-apiserver (make envtest-assets): %w", err)
	}
	defer env.Stop()
	for i := range failoverRounds[clientGoResign] + failoverRounds[clientGoKilled] {
		killed := i >= failoverRounds[clientGoResign]
		name := fmt.Sprintf("failover-%d", i)
		leader, err := elect(ctx, cfg, name, "leader", !killed)
		if err != nil {
			return err
		}
		if err := leader.wait(ctx); err != nil {
			leader.stop()
			return err
		}
		standby, err := elect(ctx, cfg, name, "standby", true)
		if err != nil {
			leader.stop()
			return err
		}
		time.Sleep(2 * failoverTTL / 8) // the standby has tried, and retries every RetryPeriod
		gone := time.Now()
		leader.stop()
		if err := standby.wait(ctx); err != nil {
			standby.stop()
			return err
		}
		row := clientGoResign
		if killed {
			row = clientGoKilled
		}
		r.failover[row] = append(r.failover[row], time.Since(gone))
		standby.stop()
	}
	return nil
}

// elector is one candidate of client-go's leader election.
type elector struct {
	led  chan struct{} // closed once it leads
	stop func()        // stops it, releasing the Lease if it was to
}

// wait waits until e leads, or ctx ends.
func (e *elector) wait(ctx context.Context) error {
	select {
	case <-e.led:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("client-go's candidate never led: %w", ctx.Err())
	}
}

// elect starts a client-go candidate id for the Lease name, with a lease
// of failoverTTL and release the ReleaseOnCancel it stops with.
func elect(ctx context.Context, cfg *rest.Config, name, id string, release bool) (*elector, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	e := &elector{led: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: failoverTTL, RenewDeadline: failoverTTL * 3 / 4, RetryPeriod: failoverTTL / 8,
		ReleaseOnCancel: release, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(e.led) }, OnStoppedLeading: func() {}},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ctx) }()
	e.stop = func() { cancel(); <-done }
	return e, nil
}

// printFailover writes the failover table: median and worst, each row's
// rounds.
func (r *results) printFailover(w io.Writer) {
	fmt.Fprintf(w, "\n## Failover: time without a leader (lease %v)\n\nFrom the leader's end to the standby told it leads.\n\n| how the leader goes | rounds | median | worst |\n|---|---|---|---|\n", failoverTTL)
	for _, row := range []string{batonResign, clientGoResign, batonKilled, clientGoKilled} {
		ds := r.failover[row]
		if len(ds) == 0 {
			continue
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		fmt.Fprintf(w, "| %s | %d | %s | %s |\n", row, len(s), ms(s[len(s)/2]), ms(s[len(s)-1]))
	}
}
