package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// concurrencies are the client counts of the cycle benchmark.
var concurrencies = []int{1, 16, 64}

// errRefused marks a refused try: not an error, not a grant.
var errRefused = errors.New("refused")

// cycles: acquire + release at each concurrency, contenders interleaved
// and their order rotated each round.
func (w *world) cycles(ctx context.Context, r *results) error {
	main, err := w.mainSidecar()
	if err != nil {
		return err
	}
	profAddr := ""
	if w.o.profile != "" {
		profAddr = w.mainProf
	}
	bare, err := w.startBare(false)
	if err != nil {
		return err
	}
	defer bare.term()
	bareShaped, err := w.startBare(true)
	if err != nil {
		return err
	}
	defer bareShaped.term()
	// The same sidecar with Go's default GOMAXPROCS (every CPU): what
	// --max-procs 1 saves.
	// Its own scope: the keys are named alike, and a cycle cut short at
	// the end of a run leaves its key held by its sidecar for a while.
	allProcs, err := w.startSidecar("all-procs", "--max-procs", "0", "--scope", "bench-all-procs")
	if err != nil {
		return err
	}
	defer allProcs.term()
	// Four sidecars sharing a scope, as the pods of one namespace do, and
	// four that watch every lock from its grant: a watching sidecar
	// receives every delete in its scope, so --watch-delay saves events
	// for each sidecar in it.
	shared, err := w.startSidecars("shared", 4, "--scope", "bench-shared")
	if err != nil {
		return err
	}
	defer termAll(shared)
	watchAll, err := w.startSidecars("watch-all", 4, "--scope", "bench-watch-all", "--watch-delay", "0")
	if err != nil {
		return err
	}
	defer termAll(watchAll)
	cs := []contender{w.rawTxn(), w.rawShaped(), w.mutexTry(), w.baton(main), w.bare(bare, bareName), w.bare(bareShaped, bareShapedName),
		w.batonNamed(allProcs, batonAllProcs), w.batonSpread(shared, batonShared), w.batonSpread(watchAll, batonWatchAll), w.roundTrips(main)}
	// Its own scope, as allProcs has.
	if against, err := w.againstSidecar("against", "bench-against"); err != nil {
		return err
	} else if against != nil {
		defer against.term()
		cs = append(cs, w.batonNamed(against, batonAgainst))
	}
	if rc, ok, err := w.redisContender(); err != nil {
		return err
	} else if ok {
		cs = append(cs, rc)
	}
	r.cycles = map[string]map[int]series{}
	return w.interleave(ctx, cs, func(round, c int, ct contender, cycle func(context.Context, int) error) error {
		var prof chan error
		if profAddr != "" && round == 0 && c == w.o.profileC && ct.name == baton {
			prof = make(chan error, 1)
			go func() { prof <- fetchProfile(profAddr, w.o.slice, w.o.profile) }()
		}
		s := w.run(ctx, c, cycle)
		if prof != nil {
			if err := <-prof; err != nil {
				return fmt.Errorf("profile: %w", err)
			}
		}
		if r.cycles[ct.name] == nil {
			r.cycles[ct.name] = map[int]series{}
			r.order = append(r.order, ct.name)
		}
		r.cycles[ct.name][c] = append(r.cycles[ct.name][c], s)
		return nil
	})
}

// interleave runs each contender of cs at each concurrency, w.o.rounds
// times, their order rotated each round so that the machine's drift hits
// all of them alike: measure runs the cycle of ct at c clients, set up
// before and done after.
func (w *world) interleave(ctx context.Context, cs []contender, measure func(round, c int, ct contender, cycle func(context.Context, int) error) error) error {
	for round := range w.o.rounds {
		for _, c := range concurrencies {
			for k := range cs {
				ct := cs[(k+round)%len(cs)]
				cycle, done, err := ct.setup(ctx, c)
				if err != nil {
					return fmt.Errorf("%s: %w", ct.name, err)
				}
				err = measure(round, c, ct, cycle)
				done()
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// refusals: 16 clients try a lock held elsewhere, Baton against the Mutex;
// and etcd's raft entries per refusal, from its raft index, and its reads,
// from its metrics.
func (w *world) refusals(ctx context.Context, r *results) error {
	holder, err := w.startSidecar("holder")
	if err != nil {
		return err
	}
	main, err := w.mainSidecar()
	if err != nil {
		return err
	}
	if err := holder.call(ctx, "POST", "/v1/locks/held", `{"owner":"holder","ttl":"1h"}`, 200); err != nil {
		return err
	}
	// Released at the end: a lock held on would keep that sidecar watching
	// the scope through the later steps.
	defer holder.call(context.WithoutCancel(ctx), "DELETE", "/v1/locks/held?owner=holder", "", 200)
	hs, err := concurrency.NewSession(w.cli, concurrency.WithTTL(60))
	if err != nil {
		return err
	}
	defer hs.Close()
	if err := concurrency.NewMutex(hs, "/bench/mutex/held").Lock(ctx); err != nil {
		return err
	}
	const c = 16
	sessions := make([]*concurrency.Session, c)
	for i := range sessions {
		if sessions[i], err = concurrency.NewSession(w.cli, concurrency.WithTTL(60)); err != nil {
			return err
		}
		defer sessions[i].Close()
	}
	refuse := func(s *sidecar) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			return s.call(ctx, "POST", "/v1/locks/held", fmt.Sprintf(`{"owner":"r%d"}`, i), http.StatusConflict)
		}
	}
	mutexTry := func(ctx context.Context, i int) error {
		if err := concurrency.NewMutex(sessions[i], "/bench/mutex/held").TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
			return fmt.Errorf("mutex try on a held key: %w", err)
		}
		return nil
	}
	refusers := []refuser{{baton, refuse(main)}, {mutex, mutexTry}}
	if against, err := w.againstSidecar("against-refuser", "bench"); err != nil {
		return err
	} else if against != nil {
		defer against.term()
		refusers = append(refusers, refuser{batonAgainst, refuse(against)})
	}
	r.refusals = map[string]series{}
	r.entries = map[string][]float64{}
	r.reads = map[string][]float64{}
	for range w.o.rounds {
		for _, x := range refusers {
			if err := w.refuseRound(ctx, r, x, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// refuser is one contender of the refusals: a try of the held lock by
// client i.
type refuser struct {
	name string
	op   func(ctx context.Context, i int) error
}

// refuseRound runs one round of x's refusals with c clients, and counts
// etcd's raft entries and reads meanwhile.
func (w *world) refuseRound(ctx context.Context, r *results, x refuser, c int) error {
	before, err := w.raftIndex(ctx)
	if err != nil {
		return err
	}
	reads := w.metric(ctx, rangesMetric)
	var prof chan error
	if w.o.profileRefusals != "" && x.name == baton && len(r.refusals[x.name]) == 0 {
		prof = make(chan error, 1)
		go func() { prof <- fetchProfile(w.mainProf, w.o.slice, w.o.profileRefusals) }()
	}
	s := w.run(ctx, c, x.op)
	if prof != nil {
		if err := <-prof; err != nil {
			return fmt.Errorf("profile: %w", err)
		}
	}
	after, err := w.raftIndex(ctx)
	if err != nil {
		return err
	}
	r.refusals[x.name] = append(r.refusals[x.name], s)
	if s.ops > 0 { // a round that refused nothing measured nothing
		r.entries[x.name] = append(r.entries[x.name], float64(after-before)/float64(s.ops))
	}
	if now := w.metric(ctx, rangesMetric); reads >= 0 && now >= 0 {
		r.reads[x.name] = append(r.reads[x.name], (now-reads)/float64(max(1, s.ops)))
	}
	return nil
}

// handoff: under contention on one key, with tries (16 clients across 4
// sidecars looping on try-acquire) and with blocking waiters (Baton's wait
// against Mutex.Lock); grants per second.
func (w *world) handoff(ctx context.Context, r *results) error {
	main, err := w.mainSidecar()
	if err != nil {
		return err
	}
	scs := []*sidecar{main}
	for i := range 3 {
		s, err := w.startSidecar(fmt.Sprintf("h%d", i))
		if err != nil {
			return err
		}
		scs = append(scs, s)
	}
	const c = 16
	sessions := make([]*concurrency.Session, c)
	for i := range sessions {
		var err error
		if sessions[i], err = concurrency.NewSession(w.cli, concurrency.WithTTL(60)); err != nil {
			return err
		}
		defer sessions[i].Close()
	}
	batonTry := func(ctx context.Context, i int) error {
		s := scs[i%len(scs)]
		err := s.call(ctx, "POST", "/v1/locks/hot-try", fmt.Sprintf(`{"owner":"t%d","ttl":"1m"}`, i), 200)
		if err != nil {
			return errRefused
		}
		return s.call(context.WithoutCancel(ctx), "DELETE", fmt.Sprintf("/v1/locks/hot-try?owner=t%d", i), "", 200)
	}
	mutexTry := func(ctx context.Context, i int) error {
		m := concurrency.NewMutex(sessions[i], "/bench/mutex/hot-try")
		if err := m.TryLock(ctx); err != nil {
			return errRefused
		}
		return m.Unlock(context.WithoutCancel(ctx))
	}
	batonWait := func(ctx context.Context, i int) error {
		s := scs[i%len(scs)]
		if err := s.call(ctx, "POST", "/v1/locks/hot", fmt.Sprintf(`{"owner":"w%d","ttl":"1m","wait":"30s"}`, i), 200); err != nil {
			return err
		}
		return s.call(context.WithoutCancel(ctx), "DELETE", fmt.Sprintf("/v1/locks/hot?owner=w%d", i), "", 200)
	}
	mutexLock := func(ctx context.Context, i int) error {
		m := concurrency.NewMutex(sessions[i], "/bench/mutex/hot")
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(context.WithoutCancel(ctx))
	}
	r.handoff = map[string]series{}
	for range w.o.rounds {
		for _, x := range []struct {
			name string
			op   func(context.Context, int) error
		}{
			{"Baton try loop", batonTry}, {"Mutex TryLock loop", mutexTry},
			{"Baton blocking wait", batonWait}, {"Mutex.Lock", mutexLock},
		} {
			r.handoff[x.name] = append(r.handoff[x.name], w.run(ctx, c, x.op))
		}
	}
	// A run cut short leaves Mutex waiters' keys: clear them for the next.
	_, err = w.cli.Delete(ctx, "/bench/mutex/hot", clientv3.WithPrefix())
	return err
}

// crash: the holder's sidecar is SIGKILLed; how long until a waiter on
// another sidecar is granted, against the lease TTL (2 s here).
func (w *world) crash(ctx context.Context, r *results) error {
	waiter, err := w.startSidecar("waiter", "--lease-ttl", "2s", "--request-timeout", "900ms")
	if err != nil {
		return err
	}
	for i := range 3 {
		holder, err := w.startSidecar(fmt.Sprintf("crash%d", i), "--lease-ttl", "2s", "--request-timeout", "900ms")
		if err != nil {
			return err
		}
		if err := holder.call(ctx, "POST", "/v1/locks/crash", `{"owner":"h","ttl":"1h"}`, 200); err != nil {
			return err
		}
		var wg sync.WaitGroup
		var granted time.Time
		var werr error
		wg.Go(func() {
			werr = waiter.call(ctx, "POST", "/v1/locks/crash", `{"owner":"w","ttl":"1h","wait":"1m"}`, 200)
			granted = time.Now()
		})
		time.Sleep(300 * time.Millisecond) // queued
		killed := time.Now()
		holder.kill()
		wg.Wait()
		if werr != nil {
			return werr
		}
		r.crash = append(r.crash, granted.Sub(killed))
		if err := waiter.call(ctx, "DELETE", "/v1/locks/crash?owner=w", "", 200); err != nil {
			return err
		}
	}
	r.crashTTL = 2 * time.Second
	return nil
}

// startSidecars starts n sidecars with the same flags, stopped when the
// world ends.
func (w *world) startSidecars(name string, n int, args ...string) ([]*sidecar, error) {
	scs := make([]*sidecar, n)
	for i := range scs {
		var err error
		if scs[i], err = w.startSidecar(fmt.Sprintf("%s-%d", name, i), args...); err != nil {
			return nil, err
		}
	}
	return scs, nil
}

// termAll stops sidecars.
func termAll(scs []*sidecar) {
	for _, s := range scs {
		s.term()
	}
}

// mainSidecar starts the sidecar the cycles and refusals run on, once;
// it serves pprof on w.mainProf when a profile was asked for.
func (w *world) mainSidecar() (*sidecar, error) {
	if w.main != nil {
		return w.main, nil
	}
	var extra []string
	if w.o.profile != "" || w.o.profileRefusals != "" {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		w.mainProf = a
		extra = []string{"--metrics-addr", a, "--pprof"}
	}
	s, err := w.startSidecar("main", extra...)
	w.main = s
	return s, err
}

// againstSidecar starts a sidecar of the -against build in scope; nil
// without -against.
func (w *world) againstSidecar(name, scope string) (*sidecar, error) {
	if w.o.against == "" {
		return nil, nil
	}
	return w.startBuild(w.o.against, name, w.etcd.endpoint, "--scope", scope)
}
