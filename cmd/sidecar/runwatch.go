package main

// What baton run does while its command runs: watch the hold stream for
// the end of the lock, or for silence that could outlast it, and stop the
// command's processes in time.

import (
	"fmt"
	"io"
	"os"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/guard"
)

// supervise waits for the command's tree, forwarding sigs to it, and
// releases the lock once the command and every process it started are
// gone (release is told the command's exit status); if the lock is lost
// first, or the sidecar stops confirming it in time, it stops the tree
// (SIGTERM, then SIGKILL after the grace) and exits lost. letGo releases
// the lock of a tree stopped for the sidecar's silence, if the sidecar
// answers at all. Processes of the command's that could not be stopped
// keep the lock from being released: it is let go with its lock delay.
//
// stopAt, when not zero, is when the command's tree is stopped whatever
// the stream says: before a reader's or a semaphore's share reaches its
// max hold, which the sidecar lets go at once.
func supervise(tree *guard.Tree, stream *baton.Stream, o runOptions, watch bool, stopAt time.Time, sigs <-chan os.Signal, release func(code int) error, letGo func(), stderr io.Writer) error {
	ended := make(chan guard.Ending, 1)
	go func() { ended <- tree.Wait() }()
	lead := tree.Grace() + stopMargin
	if !watch {
		lead = -1
	}
	lost := watchHold(stream, lead, stopAt)
	for {
		select {
		case e := <-ended:
			if err := report(e, o, stderr); err != nil {
				return err
			}
			if err := release(e.Code); err != nil {
				return err
			}
			if e.Code != 0 {
				return exitError{e.Code, ""}
			}
			return nil
		case s := <-sigs:
			tree.Forward(s)
		case l := <-lost:
			fmt.Fprintf(stderr, "baton: %s lost: %s; stopping the command and every process it started\n", o.what(), l.why)
			tree.Stop()
			var e guard.Ending
			select {
			case e = <-ended:
			case <-time.After(tree.Grace() + 3*time.Second):
				// The guard does not end (stopped itself, or starved):
				// kill it, and stop what it leaves from here.
				tree.Kill()
				e = <-ended
			}
			if err := report(e, o, stderr); err != nil {
				return err
			}
			if l.letGo {
				letGo() // the tree is gone: no need for the lock delay
			}
			return exitError{exitLost, fmt.Sprintf("%s lost while the command ran: %s", o.what(), l.why)}
		}
	}
}

// report says on stderr what went wrong with the command's tree, and fails
// when processes of it could not be stopped.
func report(e guard.Ending, o runOptions, stderr io.Writer) error {
	if e.Died != "" {
		fmt.Fprintf(stderr, "baton: %s\n", e.Died)
	}
	if len(e.Left) > 0 {
		return exitError{exitLost, fmt.Sprintf("%d process(es) of the command's could not be stopped (pids %v; in uninterruptible sleep, or another user's): %s is not released but left to its lock delay",
			len(e.Left), e.Left, o.what())}
	}
	return nil
}

// stopMargin is how long before the lock could be granted elsewhere the
// command's tree must be gone: the time for the guard to hear it is to
// stop it, and for the last SIGKILLs to land.
const stopMargin = 500 * time.Millisecond

// loss is why a lock held by baton run ended, or must be let go.
type loss struct {
	why   string
	letGo bool // the sidecar may still hold the lock: release it once the command's tree is gone
}

// watchHold reads the hold stream of a granted lock until it says the lock
// ended, or until the sidecar has been silent so long that the lock could
// be granted elsewhere before the command's tree, stopped now, is gone
// (lead before the stream's ValidUntil; never with a negative lead), and
// tells why.
func watchHold(stream *baton.Stream, lead time.Duration, stopAt time.Time) <-chan loss {
	why := make(chan loss, 1)
	events := make(chan lockapi.Event)
	failed := make(chan error, 1)
	go func() {
		defer close(events)
		for {
			ev, err := stream.Next()
			if err != nil {
				failed <- err
				return
			}
			events <- ev
		}
	}()
	go func() {
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		defer func() {
			go func() { // let the reader end with the stream
				for range events {
				}
			}()
		}()
		for {
			until := stream.ValidUntil()
			wait, silent := time.Hour, false
			if !until.IsZero() && lead >= 0 {
				wait, silent = max(time.Until(until)-lead, 0), true
			}
			if !stopAt.IsZero() && time.Until(stopAt) < wait {
				wait, silent = max(time.Until(stopAt), 0), false
			}
			timer.Reset(wait)
			select {
			case ev, ok := <-events:
				if !ok {
					why <- loss{why: "the hold stream ended without saying the lock was released (the sidecar stopped or crashed): " + (<-failed).Error()}
					return
				}
				switch ev.Event {
				case lockapi.EventLost:
					why <- loss{why: ev.Message}
					return
				case lockapi.EventReleased:
					why <- loss{why: "the lock was released by DELETE while the command ran"}
					return
				}
			case <-timer.C:
				if !silent {
					why <- loss{letGo: true, why: "it reached its --max-hold (a reader's or a semaphore's share is stopped before it is let go, as it has no lock delay)"}
					return
				}
				why <- loss{letGo: true, why: fmt.Sprintf("the sidecar has not confirmed the lock for too long: it may be frozen or cut off from etcd, and the lock could be granted elsewhere at %s",
					until.Round(0).UTC().Format(time.RFC3339Nano))}
				return
			}
		}
	}()
	return why
}

// graceFor is the kill grace of the command of a lock granted as ev, whose
// stream is valid until validUntil, and whether its tree is stopped when the
// sidecar stops confirming the lock in time (watch). A lock held whole has
// its lock delay to cover the grace. A reader's or a semaphore's share has
// none: its command must be stopped before a frozen sidecar's lease could
// expire, but not between two renewals of a live one. The sidecar gives
// itself up three quarters of a lease TTL after a renewal and hears one at
// least every third of it (every sixth straight from etcd; through etcd's
// gRPC proxy, at the proxy's renewals, on its half-second tick): the grace, the stop
// margin and a tenth of the TTL must fit in what is left, or the grace is
// cut, and said so. A lease too short for even that (under about 3.2s)
// cannot tell a frozen sidecar from a live one in time: then the command
// runs until the sidecar says the lock is lost, and a warning says so.
func (o runOptions) graceFor(ev lockapi.Event, validUntil time.Time, stderr io.Writer) (grace time.Duration, watch bool, err error) {
	if !validUntil.IsZero() && time.Until(validUntil) <= stopMargin {
		return 0, false, exitError{exitNoEtcd, fmt.Sprintf("the sidecar cannot confirm %s for long enough to run the command (it is losing etcd): nothing was run", o.what())}
	}
	if !o.shared() || ev.LeaseTTL == 0 {
		return o.killGrace, true, nil
	}
	ttl := time.Duration(ev.LeaseTTL * float64(time.Second))
	limit := (ttl*3/4 - ttl/3 - etcdKeepAliveTick - ttl/10 - stopMargin).Round(10 * time.Millisecond)
	switch {
	case limit <= 0:
		fmt.Fprintf(stderr, "baton: the sidecar's etcd lease (%v) is too short to stop a reader's or a semaphore's command before a frozen sidecar's share could be taken (that takes about 3.2s): the command stops only when the sidecar says the lock is lost\n", ttl)
		return o.killGrace, false, nil
	case o.killGrace > limit:
		fmt.Fprintf(stderr, "baton: --kill-grace %v is cut to %v: a reader's or a semaphore's share has no lock delay, so its command must be stopped within the sidecar's etcd lease (%v)\n",
			o.killGrace, limit, ttl)
		return limit, true, nil
	}
	return o.killGrace, true, nil
}

// etcdKeepAliveTick is how late etcd's client may send a lease's renewal:
// it looks for renewals due every half second.
const etcdKeepAliveTick = 500 * time.Millisecond
