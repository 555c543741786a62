package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
)

// callerOf is the process asking on ctx's connection, for the engine to
// keep with its lock (coordinator.AcquireRequest.Caller): its pid as the
// kernel gave it, NotVisible when the kernel gave 0 (a process in a pid
// namespace the sidecar's is not an ancestor of), 0 when not a unix
// socket's.
func callerOf(ctx context.Context) int32 {
	p, ok := peerOf(ctx)
	switch {
	case !ok:
		return 0
	case p.PID <= 0:
		return coordinator.NotVisible
	}
	return p.PID
}

// notVisible says why a caller's process is not known.
const notVisible = "not in the sidecar's process namespace: give the pod shareProcessNamespace: true to see it"

// maxCommand bounds a command line in an answer.
const maxCommand = 1024

// procs reads processes from a proc filesystem.
type procs struct {
	root string                    // "/proc" unless a test says otherwise
	boot func() (time.Time, error) // when the machine booted, read once
}

// newProcs reads processes from the proc filesystem at root.
func newProcs(root string) *procs {
	return &procs{root: root, boot: sync.OnceValues(func() (time.Time, error) { return bootTime(root) })}
}

// of is the process of the local caller c as it is now, nil when c is nil
// or its process is not known: exited when gone (a zombie too), unseen,
// saying why, when /proc does not tell (hidepid, say).
func (p *procs) of(c *coordinator.Caller) *lockapi.Process {
	switch {
	case c == nil || c.PID == 0:
		return nil
	case c.PID == coordinator.NotVisible:
		return &lockapi.Process{Unseen: notVisible}
	}
	out := &lockapi.Process{PID: int(c.PID)}
	cmd, started, err := p.read(c.PID)
	switch {
	// A process started after its caller asked is another with its pid.
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errZombie) || err == nil && started.After(c.Since.Add(time.Second)):
		out.Exited = true
	case err != nil:
		out.Unseen = err.Error()
	default:
		out.Command = cmd
	}
	return out
}

// errZombie is a process that has exited and waits for its parent.
var errZombie = errors.New("exited")

// read returns pid's command line and when it started.
func (p *procs) read(pid int32) (string, time.Time, error) {
	dir := filepath.Join(p.root, strconv.Itoa(int(pid)))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return "", time.Time{}, err
	}
	boot, err := p.boot()
	if err != nil {
		return "", time.Time{}, err
	}
	started, err := startOf(stat, boot)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("process %d: %w", pid, err)
	}
	f, err := os.Open(filepath.Join(dir, "cmdline"))
	if err != nil {
		return "", time.Time{}, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxCommand+1))
	if err != nil {
		return "", time.Time{}, err
	}
	return clipText(string(bytes.TrimRight(bytes.ReplaceAll(raw, []byte{0}, []byte{' '}), " ")), maxCommand), started, nil
}

// clipText cuts s to at most n bytes, "..." ending it when cut, and never
// inside a character.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// clockTicks is the kernel's USER_HZ, in which /proc/PID/stat counts: 100
// on every architecture Linux runs Baton on.
const clockTicks = 100

// startOf reads when a process started from its /proc/PID/stat (field 22,
// in clock ticks after boot) and the time the machine booted.
func startOf(stat []byte, boot time.Time) (time.Time, error) {
	// The command (field 2) is in parentheses and may hold any byte.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("unreadable stat %q", stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return time.Time{}, fmt.Errorf("stat has %d fields after the command, want 20", len(fields))
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return time.Time{}, errZombie
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("start time %q: %w", fields[19], err)
	}
	return boot.Add(time.Duration(ticks) * time.Second / clockTicks), nil
}

// bootTime reads when the machine booted from root's stat (btime).
func bootTime(root string) (time.Time, error) {
	all, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.SplitSeq(string(all), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("boot time %q: %w", v, err)
			}
			return time.Unix(boot, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("no btime in %s/stat", root)
}
