package restart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/lockstore"
)

// State is what a sidecar keeps next to its socket so that, restarted
// after a crash while the app runs on, it resumes its leases and keeps the
// app's locks.
//
// The file is a journal of JSON lines, so that it grows by what changed
// rather than being rewritten whole on every change: the first line names
// the scope, and each further line is one of
//
//	{"leases":["694d7a3b2c1e0f05",...]}   the session's leases from now on
//	{"held":{"key":...,"owner":...,"fence":...,...}}   a lock granted or extended
//	{"ended":{"key":...,"fence":...}}   a lock that ended
//	{"lost":{"key":...,"owner":...,"reason":...,...}}   a lock that ended without its release, whose owner is yet to hear of it
//	{"high":1234}   the highest etcd revision seen: no lock is granted at or below it again
//
// It is written anew (a snapshot) when the sidecar starts, when ended lines
// make up most of it, and when the sidecar lost track of the changes. A
// sidecar that shuts down leaves only the lost locks in it: every lock
// then ended, and their owners hear why from the next process.
type State struct {
	// Scope is the scope of the sidecar that wrote the file: a sidecar of
	// another scope must not take its locks.
	Scope string
	// Leases are the session's leases, in hex as in the contender keys.
	Leases []string
	// Locks are the locks held when the file was last written.
	Locks []coordinator.HeldLock
	// Lost are the locks that ended without their owners' release, which
	// the next process answers 410 lock_lost.
	Lost []coordinator.LostLock
	// High is the highest etcd revision the sidecar saw, so the highest
	// fence it may have granted: should etcd come back below it (restored
	// from an older snapshot, its data lost), the next process grants
	// nothing until etcd's revision passes it.
	High int64
}

// stateLine is one line of the state file.
type stateLine struct {
	Scope  string     `json:"scope,omitempty"`
	Leases []string   `json:"leases,omitempty"`
	Held   *heldLine  `json:"held,omitempty"`
	Ended  *endedLock `json:"ended,omitempty"`
	Lost   *lostLine  `json:"lost,omitempty"`
	High   int64      `json:"high,omitempty"`
}

// lostLine is a lost lock as the file keeps it.
type lostLine struct {
	Key       string                 `json:"key"`
	Owner     string                 `json:"owner"`
	Fence     int64                  `json:"fence"`
	Reason    coordinator.LostReason `json:"reason"`
	At        time.Time              `json:"at"`
	ExpiresAt time.Time              `json:"expires_at,omitzero"`
}

// heldLine is a held lock as the file keeps it.
type heldLine struct {
	Key        string    `json:"key"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence"`
	Hold       bool      `json:"hold,omitempty"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func lineOf(l coordinator.HeldLock) *heldLine {
	h := heldLine(l)
	return &h
}

// endedLock names a lock that ended.
type endedLock struct {
	Key   string `json:"key"`
	Fence int64  `json:"fence"`
}

// LeaseIDs returns the state's leases, none when it has none.
func (s State) LeaseIDs() []lockstore.LeaseID {
	var ids []lockstore.LeaseID
	for _, l := range s.Leases {
		if id, err := strconv.ParseInt(l, 16, 64); err == nil && id != 0 {
			ids = append(ids, lockstore.LeaseID(id))
		}
	}
	return ids
}

// leasesHex writes ids as the state file keeps them.
func leasesHex(ids []lockstore.LeaseID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(int64(id), 16)
	}
	return out
}

// Read replays the journal at path; a missing file is an empty state. A
// last line cut short (the process died while writing it) is ignored.
func Read(path string) (State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, nil
	}
	if err != nil {
		return State{}, err
	}
	var (
		s     State
		locks = map[string]coordinator.HeldLock{}
	)
	type lostKey struct{ key, owner string }
	lost := map[lostKey]coordinator.LostLock{}
	for n := 1; len(b) > 0; n++ {
		line, rest, complete := bytes.Cut(b, []byte{'\n'})
		b = rest
		var l stateLine
		if err := json.Unmarshal(line, &l); err != nil {
			if !complete {
				break // cut short by a crash
			}
			return State{}, fmt.Errorf("state file %s, line %d: %w", path, n, err)
		}
		switch {
		case n == 1 && l.Scope == "":
			return State{}, fmt.Errorf("state file %s: the first line names no scope", path)
		case n == 1:
			s.Scope = l.Scope
		case l.Held != nil:
			locks[l.Held.Key] = coordinator.HeldLock(*l.Held)
		case l.Ended != nil:
			if old, ok := locks[l.Ended.Key]; ok && old.Fence == l.Ended.Fence {
				delete(locks, l.Ended.Key)
			}
		case l.Lost != nil:
			lost[lostKey{l.Lost.Key, l.Lost.Owner}] = coordinator.LostLock(*l.Lost)
		}
		if l.Leases != nil {
			s.Leases = l.Leases
		}
		s.High = max(s.High, l.High)
	}
	for _, l := range locks {
		s.Locks = append(s.Locks, l)
	}
	for _, l := range lost {
		s.Lost = append(s.Lost, l)
	}
	return s, nil
}

// stateWriter keeps the journal at path.
type stateWriter struct {
	path, scope string
	f           *os.File // open for appending; nil when the file must be written anew
	lines       int      // lines in the file
	leases      []string // the leases it names last
	high        int64    // the highest revision it names
	buf         bytes.Buffer
}

// snapshot replaces the file with one that holds locks, lost and high,
// atomically.
func (w *stateWriter) snapshot(locks []coordinator.HeldLock, lost []coordinator.LostLock, leases []string, high int64) error {
	w.closeFile()
	tmp, err := os.CreateTemp(filepath.Dir(w.path), ".baton-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails once renamed
	bw := bufio.NewWriter(tmp)
	enc := json.NewEncoder(bw)
	err = enc.Encode(stateLine{Scope: w.scope, Leases: leases, High: high})
	for i := 0; i < len(locks) && err == nil; i++ {
		err = enc.Encode(stateLine{Held: lineOf(locks[i])})
	}
	var line []byte
	for i := 0; i < len(lost) && err == nil; i++ {
		line = appendLostLine(line[:0], lost[i])
		_, err = bw.Write(line)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), w.path)
	}
	if err != nil {
		tmp.Close()
		return err
	}
	w.f, w.lines, w.leases, w.high = tmp, 1+len(locks)+len(lost), leases, high
	return nil
}

// append adds changes, and the leases and the high revision when they
// changed, to the file.
func (w *stateWriter) append(changes []coordinator.HeldChange, leases []string, high int64) error {
	w.buf.Reset()
	enc := json.NewEncoder(&w.buf)
	n := 0
	if !slices.Equal(leases, w.leases) && leases != nil {
		_ = enc.Encode(stateLine{Leases: leases})
		n++
	}
	if high > w.high {
		_ = enc.Encode(stateLine{High: high})
		n++
	}
	for i := range changes {
		ch := &changes[i]
		if ch.Ended {
			_ = enc.Encode(stateLine{Ended: &endedLock{Key: ch.Lock.Key, Fence: ch.Lock.Fence}})
		} else {
			_ = enc.Encode(stateLine{Held: lineOf(ch.Lock)})
		}
		n++
	}
	if n == 0 {
		return nil
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		w.closeFile() // written anew next time
		return err
	}
	w.lines += n
	if leases != nil {
		w.leases = leases
	}
	w.high = max(w.high, high)
	return nil
}

// remove deletes the file: nothing is held.
func (w *stateWriter) remove() error {
	w.closeFile()
	if err := os.Remove(w.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (w *stateWriter) closeFile() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

// compactable reports whether the file holds more than twice the lines
// that held locks need.
func (w *stateWriter) compactable(held int) bool { return w.lines > 2*held+1024 }
