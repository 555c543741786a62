// Command golock holds a Baton lock while a phase runs, with Baton's Go
// client. A second caller is refused with the running execution's id: the
// webhook pattern. The work runs under the lock's context, which ends the
// moment the lock is lost (a lost line, the sidecar gone or silent), with
// the reason; pass the fence to what the work writes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

func main() {
	socket := baton.SocketPath() // $BATON_SOCKET, or the pod's socket
	client := baton.New(socket)
	key := "tenant-acme/invoice-run"

	err := client.WithLock(context.Background(), key, lockapi.Request{Owner: "exec-golock", TTL: "30m"},
		func(ctx context.Context, l *baton.Lock) error {
			fmt.Printf("granted %s with fence %d\n", key, l.Fence())
			for step := 0; step < 10; step++ {
				select {
				case <-ctx.Done(): // the lock is lost: stop before the next write
					return context.Cause(ctx)
				case <-time.After(100 * time.Millisecond): // a step of the work, with l.Fence()
				}
			}
			return nil
		})
	if refused, ok := errors.AsType[*lockapi.Error](err); ok && refused.Code == lockapi.CodeAlreadyRunning && refused.Holder != nil {
		body, _ := json.Marshal(map[string]string{"running_execution_id": refused.Holder.Owner})
		fmt.Printf("409 %s\n", body)
		return
	}
	if err != nil {
		log.Fatalf("baton: %v (set BATON_SOCKET to the sidecar's socket)", err)
	}
	fmt.Println("released")
}
