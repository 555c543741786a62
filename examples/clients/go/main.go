// Command go-client runs one phase under a Baton lock with net/http alone.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
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

	resp, err := client.Post("http://baton/v1/locks/"+key, "application/json",
		strings.NewReader(`{"owner":"`+owner+`","ttl":"30m"}`))
	if err != nil {
		log.Fatal(err)
	}
	var lock struct {
		Fence   int64  `json:"fence"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	err = json.NewDecoder(resp.Body).Decode(&lock)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		fmt.Println("already running:", lock.Message)
		return
	default:
		log.Fatalf("baton: %d %s: %s", resp.StatusCode, lock.Code, lock.Message)
	}

	fmt.Printf("running %s with fence %d\n", key, lock.Fence) // pass the fence to what you write

	req, _ := http.NewRequest(http.MethodDelete, "http://baton/v1/locks/"+key+"?owner="+url.QueryEscape(owner), nil)
	resp, err = client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("released:", resp.StatusCode == http.StatusOK)
}
