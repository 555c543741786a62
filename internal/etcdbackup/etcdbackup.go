// Package etcdbackup takes snapshots of an etcd into a directory and keeps
// the newest: the chart's scheduled backups of its etcd. Each snapshot is
// etcd's own (the Maintenance API's, what etcdctl snapshot save writes),
// named by when it was taken and the revision it holds,
// db-20261127T101500Z-r123456.db, so that a listing sorts by age and says
// how far each goes. etcdutl snapshot restore reads it.
package etcdbackup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/config"
)

// Config says where the snapshots go and how many are kept.
type Config struct {
	// Dir holds the snapshots.
	Dir string
	// Every is how often Run takes a snapshot. Default 1h.
	Every time.Duration
	// Keep is how many snapshots are kept, the newest; older ones are
	// deleted once a new one is written. Default 24.
	Keep int
	// Timeout bounds a snapshot: etcd streams its whole database file.
	// Default 10m.
	Timeout time.Duration
	// Look is how often Run looks at the directory between snapshots, to
	// report one taken beside it (etcd-backup --once) to its Observer.
	// Default 1m.
	Look time.Duration
}

// Default returns the documented defaults.
func Default() Config {
	return Config{Every: time.Hour, Keep: 24, Timeout: 10 * time.Minute, Look: time.Minute}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return config.Invalid("etcdbackup.Dir", "backup directory: required")
	case c.Every <= 0:
		return config.Invalid("etcdbackup.Every", "backup interval %v: must be positive", c.Every)
	case c.Keep < 1:
		return config.Invalid("etcdbackup.Keep", "snapshots kept %d: keep at least 1", c.Keep)
	case c.Timeout <= 0:
		return config.Invalid("etcdbackup.Timeout", "snapshot timeout %v: must be positive", c.Timeout)
	case c.Look <= 0:
		return config.Invalid("etcdbackup.Look", "directory look interval %v: must be positive", c.Look)
	}
	return nil
}

// Backup is one snapshot in the directory.
type Backup struct {
	// Name is the file's, in Config.Dir.
	Name string
	// Taken is when the snapshot was asked for.
	Taken time.Time
	// Revision is etcd's revision the snapshot holds.
	Revision int64
	// Size is the file's, in bytes.
	Size int64
}

const (
	stampLayout = "20060102T150405Z"
	partial     = ".partial-"
)

// name is b's file name.
func (b Backup) name() string {
	return fmt.Sprintf("db-%s-r%d.db", b.Taken.UTC().Format(stampLayout), b.Revision)
}

// parse reads a snapshot's file name; ok is false for another file.
func parse(name string) (Backup, bool) {
	rest, ok := strings.CutPrefix(name, "db-")
	if !ok {
		return Backup{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".db")
	if !ok {
		return Backup{}, false
	}
	stamp, rev, ok := strings.Cut(rest, "-r")
	if !ok {
		return Backup{}, false
	}
	taken, err := time.Parse(stampLayout, stamp)
	if err != nil {
		return Backup{}, false
	}
	r, err := strconv.ParseInt(rev, 10, 64)
	if err != nil || r < 0 {
		return Backup{}, false
	}
	return Backup{Name: name, Taken: taken, Revision: r}, true
}

// List returns the snapshots in dir, the newest first.
func List(dir string) ([]Backup, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Backup
	for _, e := range entries {
		b, ok := parse(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			b.Size = info.Size()
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Backup) int { return b.Taken.Compare(a.Taken) })
	return out, nil
}

// Take writes a snapshot of the etcd of cli into cfg.Dir, taken at now,
// and deletes the oldest beyond cfg.Keep. The file appears whole or not
// at all: it is written under another name, synced, and renamed. What an
// earlier Take left half-written (killed, or the disk full) is deleted.
func Take(ctx context.Context, cli *clientv3.Client, cfg Config, now time.Time) (Backup, []string, error) {
	if err := cfg.Validate(); err != nil {
		return Backup{}, nil, err
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return Backup{}, nil, err
	}
	defer unlock()
	if err := removePartials(cfg.Dir); err != nil {
		return Backup{}, nil, err
	}
	tmp := filepath.Join(cfg.Dir, partial+now.UTC().Format(stampLayout)+".db")
	if err := save(ctx, cli, cfg.Timeout, tmp); err != nil {
		os.Remove(tmp)
		return Backup{}, nil, err
	}
	rev, err := Revision(tmp)
	if err != nil {
		os.Remove(tmp)
		return Backup{}, nil, fmt.Errorf("read the snapshot's revision: %w", err)
	}
	b := Backup{Taken: now, Revision: rev}
	b.Name = b.name()
	if err := os.Rename(tmp, filepath.Join(cfg.Dir, b.Name)); err != nil {
		os.Remove(tmp)
		return Backup{}, nil, err
	}
	if err := syncDir(cfg.Dir); err != nil {
		return Backup{}, nil, err
	}
	if info, err := os.Stat(filepath.Join(cfg.Dir, b.Name)); err == nil {
		b.Size = info.Size()
	}
	deleted, err := prune(cfg.Dir, cfg.Keep)
	return b, deleted, err
}

// lockDir takes the directory's lock, waiting for another Take (a
// snapshot asked for by hand beside the scheduled ones) to end.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the backup directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the backup directory: %w", err)
	}
	return func() { f.Close() }, nil
}

// save streams etcd's snapshot into path and syncs it.
func save(ctx context.Context, cli *clientv3.Client, timeout time.Duration, path string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return fmt.Errorf("ask etcd for a snapshot: %w", err)
	}
	defer resp.Snapshot.Close()
	if _, err := io.Copy(f, resp.Snapshot); err != nil {
		return fmt.Errorf("receive etcd's snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// removePartials deletes what a Take killed half-way left.
func removePartials(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("the backup directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), partial) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// prune deletes the snapshots beyond the newest keep, and names them.
func prune(dir string, keep int) ([]string, error) {
	all, err := List(dir)
	if err != nil {
		return nil, err
	}
	var deleted []string
	for _, b := range all[min(keep, len(all)):] {
		if err := os.Remove(filepath.Join(dir, b.Name)); err != nil {
			return deleted, err
		}
		deleted = append(deleted, b.Name)
	}
	return deleted, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Revision reads the revision a snapshot holds: its last revision's key,
// or the revision it was compacted at when that is later (the last
// revisions may have been deletions that compaction dropped), or 1, an
// etcd's first, when it holds neither.
func Revision(path string) (int64, error) {
	// Only a whole file is opened: bbolt maps the file and reads its
	// pages in place, and a page past the end of one cut short faults.
	if err := Verify(path); err != nil {
		return 0, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var rev int64
	err = db.View(func(tx *bolt.Tx) error {
		keys := tx.Bucket([]byte("key"))
		if keys == nil {
			return errors.New("not an etcd database: no key bucket")
		}
		if k, _ := keys.Cursor().Last(); k != nil {
			rev = mainRevision(k)
		}
		if meta := tx.Bucket([]byte("meta")); meta != nil {
			if v := meta.Get([]byte("finishedCompactRev")); v != nil {
				rev = max(rev, mainRevision(v))
			}
		}
		return nil
	})
	// An etcd that holds no key yet is at revision 1.
	return max(rev, 1), err
}

// Verify checks that path is a whole snapshot as etcd streams it: its
// database, whose size is a multiple of 512, and the database's SHA-256
// after it.
func Verify(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size() - sha256.Size
	if size <= 0 || size%512 != 0 {
		return fmt.Errorf("%s is not a whole etcd snapshot: %d bytes, not a database and its SHA-256 (cut short?)", path, info.Size())
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, size); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return fmt.Errorf("%s is not a whole etcd snapshot: its SHA-256 does not match its content", path)
	}
	return nil
}

// mainRevision reads the main revision at the head of an etcd revision key
// (8 bytes, big-endian, then '_' and the sub-revision).
func mainRevision(k []byte) int64 {
	if len(k) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k[:8]))
}
