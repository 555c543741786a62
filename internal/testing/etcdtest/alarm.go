package etcdtest

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SetNoSpace raises etcd's NOSPACE alarm on every member (true), as etcd
// itself does when its database reaches its quota, or disarms it (false).
// While it is raised, etcd refuses every write that adds data.
func SetNoSpace(t testing.TB, cli *clientv3.Client, raised bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("etcd members: %v", err)
	}
	for _, m := range members.Members {
		if raised {
			req := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: m.ID, Alarm: pb.AlarmType_NOSPACE}
			_, err = pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, req)
		} else {
			_, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: m.ID, Alarm: pb.AlarmType_NOSPACE})
		}
		if err != nil {
			t.Fatalf("etcd NOSPACE alarm of member %x (raise %v): %v", m.ID, raised, err)
		}
	}
}
