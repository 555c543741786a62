// Command go-client holds a Baton lock while a phase runs, with net/http
// alone. The lock is held as long as the response body stays open; a second
// caller gets 409 and the running execution's id: the webhook pattern.
// While the work runs, a goroutine reads the stream: a "lost" line, the
// stream's end without a last line (the sidecar crashed) and silence past
// "valid_for_seconds" (the sidecar froze) all mean the lock may be someone
// else's, and the work must stop.
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
	"sync/atomic"
	"time"
)

// event is one line of a hold stream, or an error body.
type event struct {
	Event    string  `json:"event"`
	Fence    int64   `json:"fence"`
	ValidFor float64 `json:"valid_for_seconds"`
	Code     string  `json:"code"`
	Message  string  `json:"message"`
	Holder   *struct {
		Owner string `json:"owner"`
	} `json:"holder"`
}

// follow reads a granted stream's lines while the work runs. lost gets why
// once the lock may be lost; until is when the sidecar's last word on it
// runs out (unix nanoseconds).
func follow(lines *bufio.Scanner, granted event) (lost <-chan string, until *atomic.Int64) {
	ch := make(chan string, 1)
	until = new(atomic.Int64)
	until.Store(time.Now().Add(time.Duration(granted.ValidFor * float64(time.Second))).UnixNano())
	go func() {
		for lines.Scan() {
			var ev event
			if json.Unmarshal(lines.Bytes(), &ev) != nil || ev.Event == "lost" || ev.Event == "released" {
				ch <- ev.Event + ": " + ev.Message
				return
			}
			if ev.ValidFor > 0 {
				until.Store(time.Now().Add(time.Duration(ev.ValidFor * float64(time.Second))).UnixNano())
			}
		}
		ch <- "the stream ended without a last line: the sidecar stopped"
	}()
	return ch, until
}

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
	var ev event
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
	if !lines.Scan() || json.Unmarshal(lines.Bytes(), &ev) != nil || ev.Event != "granted" {
		log.Fatalf("baton: not granted: %s %s: %v", ev.Event, ev.Message, lines.Err())
	}
	fmt.Printf("running %s with fence %d\n", key, ev.Fence) // pass the fence to what you write
	lost, until := follow(lines, ev)
	for range 3 { // the work, in steps; before each step that writes, check the lock
		select {
		case why := <-lost:
			log.Fatalf("baton: lock lost, work stopped: %s", why)
		default:
		}
		if time.Now().UnixNano() > until.Load() {
			log.Fatal("baton: lock lost, work stopped: no word from the sidecar in time")
		}
		time.Sleep(100 * time.Millisecond) // a step of the work, with the fence
	}
	resp.Body.Close() // closing the stream releases the lock
	fmt.Println("released")
}
