// Command golead is one replica of a scheduler that must run on one replica
// at a time, with Baton's Go client: it campaigns in the election
// "scheduler", announcing its address, stands by while another replica
// leads, and runs the schedule's rounds only while it leads (Done is closed
// the moment the leadership may be lost), each with its fence. Release
// resigns, and the next replica leads at once.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

func main() {
	client := baton.New(baton.SocketPath())                  // $BATON_SOCKET, or the pod's socket
	address := cmp.Or(os.Getenv("ADDRESS"), "10.0.0.5:8080") // what this replica announces
	ctx := context.Background()

	now, err := client.Leader(ctx, "scheduler")
	if err != nil {
		log.Fatalf("baton: %v (set BATON_SOCKET to the sidecar's socket)", err)
	}
	if now.Held {
		fmt.Printf("standby: %s leads with fence %d\n", now.Holder.Value, now.Fence)
	}
	leadership, err := client.Lead(ctx, "scheduler", lockapi.Request{Value: address})
	if err != nil {
		log.Fatalf("baton: %v", err)
	}
	fmt.Printf("%s leads scheduler with fence %d\n", address, leadership.Fence())
	for round := 0; round < 10 && leadership.Err() == nil; round++ {
		select {
		case <-leadership.Done(): // another replica may lead: stop before the next write
		case <-time.After(200 * time.Millisecond): // a round of the schedule, writing with leadership.Fence()
		}
	}
	// Resign; after a loss, Release says why.
	if _, err := leadership.Release(ctx); err != nil {
		if lost, ok := errors.AsType[*baton.LostError](err); ok {
			fmt.Printf("%s lost the leadership: %s\n", address, lost.Reason)
			return
		}
		log.Fatalf("baton: resign: %v", err)
	}
	fmt.Printf("%s resigned\n", address)
}
