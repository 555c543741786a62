// Package client talks to a Baton sidecar over its unix socket: what the
// `baton run` and `baton locks` commands use. Apps need no library; this is
// the same HTTP any client sends.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Client calls one sidecar.
type Client struct {
	socket string
	http   *http.Client
}

// New returns a client of the sidecar serving socket.
func New(socket string) *Client {
	return &Client{socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}}
}

// Holder is a holder record as the API shows it.
type Holder struct {
	Owner      string    `json:"owner"`
	Pod        string    `json:"pod"`
	Namespace  string    `json:"namespace"`
	Node       string    `json:"node"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Foreign    bool      `json:"foreign"`
}

// APIError is an error answer of the sidecar.
type APIError struct {
	Status  int     `json:"-"`
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Holder  *Holder `json:"holder"`
	Fence   int64   `json:"fence"`
	Reason  string  `json:"reason"`
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code) }

// LockRequest is the body of acquire, hold and extend.
type LockRequest struct {
	Owner string `json:"owner,omitempty"`
	TTL   string `json:"ttl,omitempty"`
	Wait  string `json:"wait,omitempty"`
	// MaxHold caps a hold stream's lock (hold only).
	MaxHold string `json:"max_hold,omitempty"`
}

// Event is one line of a hold stream.
type Event struct {
	Event      string    `json:"event"`
	Key        string    `json:"key"`
	Owner      string    `json:"owner"`
	Position   int       `json:"position"`
	Fence      int64     `json:"fence"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	MaxHoldAt  time.Time `json:"max_hold_at"`
	Reason     string    `json:"reason"`
	Code       string    `json:"code"`
	Message    string    `json:"message"`
	Holder     *Holder   `json:"holder"`
}

// Stream is an open hold stream.
type Stream struct {
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
}

// Hold opens a hold stream for key. A refusal before any event (the lock is
// held and no wait was asked) is an *APIError.
func (c *Client) Hold(ctx context.Context, key string, req LockRequest) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.do(ctx, http.MethodPost, "/v1/locks/"+key+":hold", req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		return nil, decodeError(resp)
	}
	return &Stream{body: resp.Body, dec: json.NewDecoder(bufio.NewReader(resp.Body)), cancel: cancel}, nil
}

// Next returns the next event; io.EOF when the stream ended.
func (s *Stream) Next() (Event, error) {
	var ev Event
	if err := s.dec.Decode(&ev); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return Event{}, err
	}
	return ev, nil
}

// Close closes the stream: the sidecar releases the lock or withdraws the
// waiter.
func (s *Stream) Close() error {
	s.cancel()
	return s.body.Close()
}

// Released is the answer to a release.
type Released struct {
	Key     string  `json:"key"`
	Owner   string  `json:"owner"`
	Fence   int64   `json:"fence"`
	HeldFor string  `json:"held_for"`
	Seconds float64 `json:"held_for_seconds"`
}

// Release releases owner's lock of key.
func (c *Client) Release(ctx context.Context, key, owner string) (Released, error) {
	var r Released
	err := c.call(ctx, http.MethodDelete, "/v1/locks/"+key+"?owner="+url.QueryEscape(owner), &r)
	return r, err
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://baton"+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the Baton sidecar at %s: %w", c.socket, err)
	}
	return resp, nil
}

func decodeError(resp *http.Response) error {
	defer resp.Body.Close()
	e := &APIError{Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, e); err != nil || e.Code == "" {
		e.Code, e.Message = "unexpected", fmt.Sprintf("unexpected answer: %.200s", b)
	}
	return e
}

// LockStatus is one lock as status and list show it.
type LockStatus struct {
	Key       string    `json:"key"`
	Held      bool      `json:"held"`
	Holder    *Holder   `json:"holder,omitempty"`
	Fence     int64     `json:"fence,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Waiters   int       `json:"waiters"`
}

// Status reads one lock.
func (c *Client) Status(ctx context.Context, key string) (LockStatus, error) {
	var st LockStatus
	err := c.call(ctx, http.MethodGet, "/v1/locks/"+key, &st)
	return st, err
}

// List reads the locks whose key starts with prefix.
func (c *Client) List(ctx context.Context, prefix string) (locks []LockStatus, truncated bool, err error) {
	var out struct {
		Locks     []LockStatus `json:"locks"`
		Truncated bool         `json:"truncated"`
	}
	path := "/v1/locks"
	if prefix != "" {
		path += "?prefix=" + url.QueryEscape(prefix)
	}
	err = c.call(ctx, http.MethodGet, path, &out)
	return out.Locks, out.Truncated, err
}

// Forced is the answer to a force release.
type Forced struct {
	Key    string  `json:"key"`
	Fence  int64   `json:"fence"`
	Holder *Holder `json:"holder"`
}

// ForceRelease frees key whoever holds it; fence, when not 0, must be the
// holder's. by names who asks, for the sidecar's log.
func (c *Client) ForceRelease(ctx context.Context, key string, fence int64, by string) (Forced, error) {
	q := url.Values{"force": {"true"}}
	if fence != 0 {
		q.Set("fence", fmt.Sprint(fence))
	}
	if by != "" {
		q.Set("by", by)
	}
	var f Forced
	err := c.call(ctx, http.MethodDelete, "/v1/locks/"+key+"?"+q.Encode(), &f)
	return f, err
}

// call makes a request without a body and decodes a 200 answer into out.
func (c *Client) call(ctx context.Context, method, path string, out any) error {
	resp, err := c.do(ctx, method, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
