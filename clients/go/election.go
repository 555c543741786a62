package baton

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// An election (/v1/elections/NAME) has one leader at a time: the
// candidate that campaigned first among those still campaigning, with the
// value it announced (req.Value) and a fence of its own, larger than every
// earlier leader's. Its name is a key's; the lock of the same name is
// another line.

// Lead campaigns in election name until elected, as long as it takes
// unless req.Wait says otherwise, then leads until the Lock is released
// (which resigns), until ctx ends (which resigns too), or until the
// leadership is lost. The Lock's context is done as soon as the
// leadership ends or may have ended, as for a lock (Client.Lock): work
// that only the leader may do runs under it.
func (c *Client) Lead(ctx context.Context, name string, req lockapi.Request) (*Lock, error) {
	return c.lockOf(ctx, elections, name, req)
}

// Campaign opens the stream of a campaign in election name: queued, then
// granted (with the value announced) once leader, heartbeats, and how the
// leadership ended, as a hold stream. Closing it resigns.
func (c *Client) Campaign(ctx context.Context, name string, req lockapi.Request) (*Stream, error) {
	return c.streamOf(ctx, elections, name, req)
}

// CampaignOnConn is Campaign on a connection of its own, returned as a file
// too, as HoldOnConn: baton elect gives it to the process that stops its
// command.
func (c *Client) CampaignOnConn(ctx context.Context, name string, req lockapi.Request) (*Stream, *os.File, error) {
	return c.streamOnConn(ctx, elections, name, req)
}

// Proclaim has owner, the leader of election name, announce value instead
// of what it announced ("" to announce nothing); its fence stays.
func (c *Client) Proclaim(ctx context.Context, name, owner, value string) (lockapi.Grant, error) {
	body := struct {
		Owner string `json:"owner"`
		Value string `json:"value"` // sent even when "": the API needs it
	}{owner, value}
	resp, err := c.do(ctx, http.MethodPost, elections.path+name+":proclaim", body)
	if err != nil {
		return lockapi.Grant{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return lockapi.Grant{}, decodeError(resp)
	}
	var g lockapi.Grant
	err = json.NewDecoder(resp.Body).Decode(&g)
	return g, err
}

// Resign ends owner's leadership of election name, or withdraws its
// candidacy: the next candidate leads at once.
func (c *Client) Resign(ctx context.Context, name, owner string) (lockapi.Released, error) {
	return c.release(ctx, elections, name, owner)
}

// Leader reads who leads election name: a status whose Holder is the
// leader (with its Value) when Held, and Fence its fence.
func (c *Client) Leader(ctx context.Context, name string) (lockapi.Status, error) {
	var st lockapi.Status
	err := c.call(ctx, http.MethodGet, elections.path+name, &st)
	return st, err
}

// Observe opens a watch of election name, or with name "" of every
// election whose name starts with prefix: the state, then each new
// leader (granted), each end, and each value proclaimed; never a leader
// older than one it told.
func (c *Client) Observe(ctx context.Context, name, prefix string) (*Watcher, error) {
	path := "/v1/elections:observe?prefix=" + url.QueryEscape(prefix)
	if name != "" {
		path = elections.path + name + ":observe"
	}
	body, dec, cancel, err := c.open(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	return &Watcher{body: body, dec: dec, cancel: cancel}, nil
}
