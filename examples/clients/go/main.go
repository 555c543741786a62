// Command go-client holds a Baton lock while a phase runs, with net/http
// alone. The lock is held as long as the response body stays open; a second
// caller gets 409 and the running execution's id: the webhook pattern.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
)

func main() {
	socket := os.Getenv("BATON_SOCKET")
	if socket == "" {
		socket = "/var/run/baton/baton.sock"
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	key, owner := "terraform-prod", "exec-go"

	resp, err := client.Post("http://baton/v1/locks/"+key+":hold", "application/json",
		strings.NewReader(`{"owner":"`+owner+`","ttl":"30m"}`))
	if err != nil {
		log.Fatalf("baton: cannot reach the sidecar at %s (set BATON_SOCKET): %v", socket, err)
	}
	defer resp.Body.Close()
	type holder struct {
		Owner string `json:"owner"`
	}
	var ev struct {
		Event   string  `json:"event"`
		Fence   int64   `json:"fence"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Holder  *holder `json:"holder"`
	}
	if resp.StatusCode != http.StatusOK { // an error body: {"code","message",...}
		if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
			log.Fatalf("baton: %d, and the body is not JSON: %v", resp.StatusCode, err)
		}
	}
	if resp.StatusCode == http.StatusConflict && ev.Holder != nil { // webhook pattern: 409 with the running execution's id
		fmt.Printf("409 {\"error\":\"already running\",\"running_execution_id\":%q}\n", ev.Holder.Owner)
		return
	}
	if resp.StatusCode != http.StatusOK {
		log.Fatalf("baton: %d %s: %s", resp.StatusCode, ev.Code, ev.Message)
	}
	lines := bufio.NewScanner(resp.Body) // one JSON event a line
	for lines.Scan() {
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			log.Fatal(err)
		}
		switch ev.Event {
		case "granted":
			fmt.Printf("running %s with fence %d\n", key, ev.Fence) // pass the fence to what you write
			resp.Body.Close()                                       // closing the stream releases the lock
			fmt.Println("released")
			return
		case "lost", "refused", "error":
			log.Fatalf("baton: %s: %s", ev.Event, ev.Message)
		}
	}
	log.Fatalf("baton: the stream ended before a grant: %v", lines.Err())
}
