package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/coordinator"
)

// state is what a sidecar keeps next to its socket so that, restarted
// after a crash while the app runs on, it resumes its lease and keeps the
// app's locks.
type state struct {
	Scope string                 `json:"scope"`
	Lease string                 `json:"lease"` // hex, as in the contender keys
	Locks []coordinator.HeldLock `json:"locks"`
}

// leaseID returns the state's lease, 0 when none.
func (s state) leaseID() clientv3.LeaseID {
	id, err := strconv.ParseInt(s.Lease, 16, 64)
	if err != nil {
		return 0
	}
	return clientv3.LeaseID(id)
}

// readState reads path; a missing file is an empty state.
func readState(path string) (state, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return state{}, nil
	}
	if err != nil {
		return state{}, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return state{}, fmt.Errorf("state file %s: %w", path, err)
	}
	return s, nil
}

// writeState replaces path atomically; with no locks it removes it.
func writeState(path string, s state) error {
	if len(s.Locks) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".baton-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
