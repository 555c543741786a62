package mirror

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestWatchEndsAtCompaction: a watch that would start at a compacted
// revision ends with an error, so that follow reads everything again; a
// watch from the current revision feeds the view and the reconciler.
func TestWatchEndsAtCompaction(t *testing.T) {
	cli, _ := testEtcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &Mirror{cfg: Default(), etcd: cli, log: logr.Discard(), view: newView(), events: make(chan event.GenericEvent, 16)}
	m.cfg.Scopes = []string{"compact"}

	put, err := cli.Put(ctx, "/baton/v1/compact/locks/a/1f", `{"owner":"o"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/baton/v1/compact/locks/a/1f", `{"owner":"o2"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, put.Header.Revision+1); err != nil {
		t.Fatal(err)
	}
	err = m.watch(ctx, put.Header.Revision)
	if err == nil || !strings.Contains(err.Error(), "compaction") {
		t.Fatalf("watch from a compacted revision: %v; want a compaction error", err)
	}

	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.watch(wctx, put.Header.Revision+2) }()
	time.Sleep(200 * time.Millisecond)
	if _, err := cli.Put(ctx, "/baton/v1/compact/locks/b/2e", `{"owner":"w"}`); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-m.events:
		if ev.Object.GetNamespace() != "compact" || ev.Object.GetName() != ObjectName("b") {
			t.Errorf("enqueued %s/%s", ev.Object.GetNamespace(), ev.Object.GetName())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change sent to the reconciler")
	}
	if key, cs, _ := m.view.get(objectRef{namespace: "compact", name: ObjectName("b")}); key != "b" || len(cs) != 1 || cs[0].holder.Owner != "w" {
		t.Errorf("view of b: %q %+v", key, cs)
	}
	wcancel()
	if err := <-done; err != nil {
		t.Errorf("watch after cancel: %v", err)
	}
}
