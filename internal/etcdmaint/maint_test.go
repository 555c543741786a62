package etcdmaint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.MainWithoutEtcd(m)) }

// TestRules: when each rule defragments a member, and when none does.
func TestRules(t *testing.T) {
	c := Default()
	const mib = 1 << 20
	full := func(rev, size, inUse int64) Member {
		return Member{Revision: rev, Size: size * mib, InUse: inUse * mib, Quota: 50 * mib}
	}
	for _, tc := range []struct {
		name    string
		m       Member
		noSpace bool
		full    Member // as its last defragmentation left it full
		want    Reason
	}{
		{"small and fragmented", Member{Size: 50 * mib, InUse: 5 * mib, Quota: 2048 * mib}, false, Member{}, ""},
		{"large and fragmented", Member{Size: 400 * mib, InUse: 150 * mib, Quota: 2048 * mib}, false, Member{}, Fragmented},
		{"large, mostly in use", Member{Size: 400 * mib, InUse: 300 * mib, Quota: 2048 * mib}, false, Member{}, ""},
		{"near its quota, a tenth free", Member{Size: 1700 * mib, InUse: 1500 * mib, Quota: 2048 * mib}, false, Member{}, NearQuota},
		{"near its quota, all in use", Member{Size: 1700 * mib, InUse: 1690 * mib, Quota: 2048 * mib}, false, Member{}, ""},
		{"out of space, room once defragmented", Member{Size: 50 * mib, InUse: 40 * mib, Quota: 50 * mib, Revision: 7}, true, Member{}, NoSpace},
		{"out of space, full at this revision though in use has room", Member{Size: 50 * mib, InUse: 40 * mib, Quota: 50 * mib, Revision: 7}, true, full(7, 50, 40), ""},
		{"out of space, its data filling the quota", Member{Size: 50 * mib, InUse: 49 * mib, Quota: 50 * mib, Revision: 7}, true, Member{}, NoSpace},
		{"out of space, filled at this revision", Member{Size: 50 * mib, InUse: 49 * mib, Quota: 50 * mib, Revision: 7}, true, full(7, 50, 49), ""},
		{"out of space, keys deleted since", Member{Size: 50 * mib, InUse: 49 * mib, Quota: 50 * mib, Revision: 8}, true, full(7, 50, 49), NoSpace},
		{"out of space, its compaction freed room since", Member{Size: 50 * mib, InUse: 10 * mib, Quota: 50 * mib, Revision: 7}, true, full(7, 50, 49), NoSpace},
		{"out of space, its compaction freed too little since", Member{Size: 50 * mib, InUse: 47 * mib, Quota: 50 * mib, Revision: 7}, true, full(7, 50, 49), ""},
		{"out of space, its file has room", Member{Size: 30 * mib, InUse: 10 * mib, Quota: 50 * mib, Revision: 8}, true, Member{}, ""},
		{"out of space, its quota unknown", Member{Size: 50 * mib, InUse: 49 * mib, Revision: 7}, true, Member{Revision: 7}, NoSpace},
		{"not answering", Member{Err: errors.New("down")}, true, Member{}, ""},
	} {
		if got := c.reason(tc.m, tc.noSpace, tc.full); got != tc.want {
			t.Errorf("%s: reason %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestConfigValidate: each bad field is named.
func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for field, mod := range map[string]func(*Config){
		"Interval":      func(c *Config) { c.Interval = 0 },
		"FreeRatio":     func(c *Config) { c.FreeRatio = 1 },
		"MinSize":       func(c *Config) { c.MinSize = -1 },
		"QuotaRatio":    func(c *Config) { c.QuotaRatio = 0 },
		"Timeout":       func(c *Config) { c.Timeout = 0 },
		"DefragTimeout": func(c *Config) { c.DefragTimeout = -time.Second },
	} {
		c := Default()
		mod(&c)
		var fe *config.FieldError
		if err := c.Validate(); !errors.As(err, &fe) || fe.Field != "etcdmaint."+field {
			t.Errorf("%s out of range: %v, want an error about it", field, err)
		}
	}
}

// recorder is an Observer that keeps what it heard.
type recorder struct {
	mu     sync.Mutex
	saw    [][]Member
	defrag []string // "member reason" or "member reason failed"
}

func (r *recorder) Saw(ms []Member) { r.mu.Lock(); r.saw = append(r.saw, ms); r.mu.Unlock() }
func (r *recorder) Defragmented(m string, why Reason, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := m + " " + string(why)
	if err != nil {
		s += " failed"
	}
	r.defrag = append(r.defrag, s)
}

func start(t *testing.T, mod func(*embedetcd.Config)) *clientv3.Client {
	t.Helper()
	srv, err := etcdtest.StartWith(mod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, _ := srv.Client(t)
	return cli
}

func logger() *slog.Logger {
	if os.Getenv("BATON_TEST_LOG") != "" { // the components' logs, to stderr
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// churn writes n values of size bytes under prefix and deletes them, as
// locks taken and let go do, and returns etcd's revision after.
func churn(t *testing.T, cli *clientv3.Client, prefix string, n, size int) (int64, error) {
	t.Helper()
	ctx := context.Background()
	v := strings.Repeat("x", size)
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s%d", prefix, i), v); err != nil {
			return 0, err
		}
	}
	resp, err := cli.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// churnToNoSpace takes and lets go keys until etcd, with no compaction
// of its history, is out of space.
func churnToNoSpace(t *testing.T, cli *clientv3.Client, quota int64) {
	t.Helper()
	var err error
	for i := 0; err == nil && i < 100; i++ {
		_, err = churn(t, cli, fmt.Sprintf("/fill/%d/", i), 20, 16<<10)
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("writing %d bytes' worth into a %d-byte quota: %v, want etcd's NOSPACE", 100*20*16<<10, quota, err)
	}
}

// waitFragmented waits until cli's first member reports less than half
// of its database file in use. etcd counts the pages a compaction frees
// once its backend commits again: a small write every half second gives
// it one to make, on a machine too busy for its own timer to come soon.
func waitFragmented(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	var st *clientv3.StatusResponse
	var nudged time.Time
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if st, err = cli.Status(context.Background(), cli.Endpoints()[0]); err != nil {
			t.Fatal(err)
		}
		if st.DbSizeInUse < st.DbSize/2 {
			return
		}
		if time.Since(nudged) > 500*time.Millisecond {
			if _, err := cli.Put(context.Background(), "/nudge", "x"); err != nil {
				t.Fatal(err)
			}
			nudged = time.Now()
		}
	}
	t.Fatalf("etcd's file %d bytes, %d in use, 30s after the compaction: not fragmented", st.DbSize, st.DbSizeInUse)
}

// TestDefragmentsAFragmentedMember: a member whose file is mostly free
// after a compaction is defragmented, and its file shrinks; a pass after
// it finds nothing to do.
func TestDefragmentsAFragmentedMember(t *testing.T) {
	cli := start(t, func(*embedetcd.Config) {})
	rev, err := churn(t, cli, "/churn/", 400, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// etcd counts the pages a compaction frees as in use until its
	// backend's next commit (every 100 ms): the member is fragmented once
	// it says so.
	waitFragmented(t, cli)
	cfg := Default()
	cfg.MinSize = 1 << 20
	var rec recorder
	m, err := New(cli, cfg, logger(), &rec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before := r.Members[0]
	if len(r.Defragmented) != 1 || len(rec.defrag) != 1 || rec.defrag[0] != "baton fragmented" {
		t.Fatalf("pass over a fragmented member (%d bytes, %d in use): %+v, heard %v", before.Size, before.InUse, r, rec.defrag)
	}
	again, err := m.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := again.Members[0]
	if len(again.Defragmented) != 0 || after.Size >= before.Size/2 || !after.Leader {
		t.Fatalf("after the defragmentation: %+v (before: %d bytes); want it not defragmented again, its file less than half", again, before.Size)
	}
	t.Logf("file %d -> %d bytes (in use %d)", before.Size, after.Size, after.InUse)
}

// TestRecoversFromNoSpace: an etcd whose database reaches its quota raises
// its NOSPACE alarm and refuses writes; a pass compacts its history,
// defragments it and disarms the alarm, and writes are taken again.
func TestRecoversFromNoSpace(t *testing.T) {
	const quota = 4 << 20
	cli := start(t, func(c *embedetcd.Config) { c.Quota = quota; c.History = time.Hour })
	churnToNoSpace(t, cli, quota)
	var rec recorder
	m, err := New(cli, Default(), logger(), &rec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Compacted == 0 || !r.Disarmed || len(rec.defrag) != 1 || rec.defrag[0] != "baton no_space" || len(r.Members[0].Alarms) != 1 {
		t.Fatalf("pass over an etcd out of space: %+v, heard %v", r, rec.defrag)
	}
	if _, err := cli.Put(context.Background(), "/after", "x"); err != nil {
		t.Fatalf("write after the pass: %v", err)
	}
	alarms, err := cli.AlarmList(context.Background())
	if err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after the pass: %+v %v", alarms, err)
	}
}

// fillWithLiveData writes keys that are never deleted until etcd raises
// its NOSPACE alarm with at least roomRatio of quota in use. One filling
// may stop short of it (the file grows by more than its data while
// written): the alarm is then disarmed, the file defragmented down to its
// data, and the filling goes on.
func fillWithLiveData(t *testing.T, cli *clientv3.Client, quota int64) {
	t.Helper()
	ctx := context.Background()
	v := strings.Repeat("x", 16<<10)
	n := 0
	for round := range 5 {
		var err error
		for ; err == nil && n < 5000; n++ {
			_, err = cli.Put(ctx, fmt.Sprintf("/kept/%d", n), v)
		}
		if !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("filling the quota with live keys: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // etcd's backend commits what it freed
		st, err := cli.Status(ctx, cli.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		if !room(st.DbSizeInUse, quota) {
			return
		}
		t.Logf("round %d: %d of etcd's %d bytes in use at NOSPACE, under %.2f of the quota: filling on", round, st.DbSizeInUse, st.DbSize, roomRatio)
		if _, err := cli.Defragment(ctx, cli.Endpoints()[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("etcd's live data stayed under the quota after 5 fillings")
}

// TestKeepsTheAlarmWhenDataFillsTheQuota: when what is in use itself fills
// the quota, the alarm stays raised (disarmed, etcd would refuse the next
// write again) and the pass says what to change.
func TestKeepsTheAlarmWhenDataFillsTheQuota(t *testing.T) {
	const quota = 4 << 20
	cli := start(t, func(c *embedetcd.Config) { c.Quota = quota })
	fillWithLiveData(t, cli, quota)
	var rec recorder
	m, err := New(cli, Default(), logger(), &rec)
	if err != nil {
		t.Fatal(err)
	}
	// The first pass tries a defragmentation (etcd counts what a
	// compaction frees as in use until it commits again); the next, with
	// nothing deleted since, stop no member for nothing.
	for pass := range 3 {
		r, err := m.Pass(context.Background())
		if err == nil || r.Disarmed || !strings.Contains(err.Error(), "raise etcd's --quota-backend-bytes") {
			t.Fatalf("pass %d over an etcd full of live data: %+v, %v; want the alarm kept, saying why", pass, r, err)
		}
		if len(rec.defrag) != 1 {
			t.Fatalf("after pass %d over an etcd full of live data, heard %v; want the one defragmentation of the first pass", pass, rec.defrag)
		}
	}
	// What is not Baton's deleted, the next pass makes room and disarms.
	if _, err := cli.Delete(context.Background(), "/kept/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	r, err := m.Pass(context.Background())
	if err != nil || !r.Disarmed || len(rec.defrag) != 2 || rec.defrag[1] != "baton no_space" {
		t.Fatalf("pass after the data was deleted: %+v, %v, heard %v; want one defragmentation and the alarm disarmed", r, err, rec.defrag)
	}
	if _, err := cli.Put(context.Background(), "/after", "x"); err != nil {
		t.Fatalf("write after the pass: %v", err)
	}
}
