package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/restart"
)

// Hooks are what Run tells the engine's runner.
type Hooks struct {
	// Ready is called once the engine can grant locks and has taken over
	// those of the process before it; never if ctx ends first.
	Ready func()
	// Drain is called on the way down, once the engine grants nothing
	// more, and before it lets every lock go: the front ends tell the
	// callers of their hold streams to stop their work, and wait for them
	// to hang up until ctx ends (Config.ShutdownGrace).
	Drain func(ctx context.Context)
}

// Run runs the engine until ctx ends, then takes it down in order and
// returns once every lock is let go and the state file written. It runs
// once.
func (e *Engine) Run(ctx context.Context, h Hooks) error {
	// The components outlive ctx: they are stopped one by one on the way
	// down.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	var wg sync.WaitGroup
	goRun := func(ctx context.Context, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				e.log.Error("component stopped", "err", err)
			}
		})
	}
	goRun(runCtx, e.keeper.Run)
	goRun(runCtx, e.followPolicy)
	goRun(runCtx, e.followFloor)
	coordCtx, stopCoord := context.WithCancel(runCtx)
	goRun(coordCtx, e.coord.Run)
	goRun(coordCtx, e.elect.Run)

	ready := waitReady(ctx, e.coord, e.log)
	if ready && e.Adopting() {
		restart.Keep(ctx, e.sessions, e.coord, e.prev, e.log)
		// Every candidate of an election campaigns on a stream, whose
		// caller died with the process before: its keys go.
		restart.Keep(ctx, e.sessions, e.elect, restart.State{Leases: e.prev.Leases}, e.log.With("space", "elections"))
	}
	close(e.adopted)
	saveCtx, stopSaving := context.WithCancel(runCtx)
	saved := make(chan struct{})
	if e.cfg.StatePath == "" {
		close(saved)
	} else {
		goRun(saveCtx, func(ctx context.Context) error {
			defer close(saved)
			return restart.Save(ctx, e.cfg.StatePath, e.cfg.Coordinator.Scope, e.coord, e.sessions, e.history.High)
		})
	}
	if ready && h.Ready != nil {
		h.Ready()
	}

	<-ctx.Done()
	start := time.Now()
	// The holds' callers (baton run) stop their work first: until they
	// hang up, or the grace is over, their locks stay held and nothing is
	// granted.
	e.coord.Drain()
	e.elect.Drain()
	if h.Drain != nil {
		dctx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownGrace)
		h.Drain(dctx)
		cancel()
	}
	e.log.Info("shutting down: releasing every lock", "drained", time.Since(start).Round(time.Millisecond))
	e.coord.Shutdown()
	e.elect.Shutdown()
	// Neither the state file's journal of the locks that just ended nor
	// the watch of their deletes is of use now; with many locks, either
	// would compete with the revokes for CPU.
	stopSaving()
	<-saved
	stopCoord()
	e.revoke()
	e.log.Info("every lock released", "took", time.Since(start).Round(time.Millisecond))
	stopRun()
	wg.Wait()
	// The owners of the locks that just ended hear why from the next
	// process (410 lock_lost, reason shutdown), not 404.
	if e.cfg.StatePath != "" {
		if err := restart.Closed(e.cfg.StatePath, e.cfg.Coordinator.Scope, e.coord.Losses(), e.history.High()); err != nil {
			e.log.Warn("write the state file", "err", err)
		}
	}
	return nil
}

// revoke revokes the session's leases, which frees every lock at once:
// one revoke per lease, a few milliseconds each.
func (e *Engine) revoke() {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.keeper.Close(rctx); err != nil {
		e.log.Error("revoke lease: locks stay held until the lease TTL passes", "err", err)
	}
}

// waitReady waits until coord can grant locks, or ctx ends; it says so in
// the log every few seconds while etcd cannot be reached.
func waitReady(ctx context.Context, coord *coordinator.Coordinator, log *slog.Logger) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	start, warned := time.Now(), time.Now()
	for {
		err := coord.Ready()
		if err == nil {
			return true
		}
		if time.Since(warned) > 5*time.Second {
			warned = time.Now()
			log.Warn("not ready yet", "err", err, "waited", time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
