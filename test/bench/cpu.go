package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux the bench runs on).
const clockTick = 10 * time.Millisecond

// cpuTime returns the user + system CPU time the process pid has used.
func cpuTime(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields after it are fixed.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

// cpuSplit is CPU time by tier: etcd, the sidecars, the bench's clients.
type cpuSplit struct{ etcd, sidecars, clients time.Duration }

func (a cpuSplit) sub(b cpuSplit) cpuSplit {
	return cpuSplit{a.etcd - b.etcd, a.sidecars - b.sidecars, a.clients - b.clients}
}

func (a cpuSplit) add(b cpuSplit) cpuSplit {
	return cpuSplit{a.etcd + b.etcd, a.sidecars + b.sidecars, a.clients + b.clients}
}

func (a cpuSplit) total() time.Duration { return a.etcd + a.sidecars + a.clients }

// cpuNow reads the CPU time used so far by etcd, every sidecar still
// running and the bench itself.
func (w *world) cpuNow() cpuSplit {
	c := cpuSplit{etcd: cpuTime(w.etcd.cmd.Process.Pid), clients: cpuTime(os.Getpid())}
	for _, s := range w.sidecars {
		select {
		case <-s.exited:
		default:
			c.sidecars += cpuTime(s.cmd.Process.Pid)
		}
	}
	return c
}
