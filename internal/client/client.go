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

// Release releases owner's lock of key.
func (c *Client) Release(ctx context.Context, key, owner string) error {
	resp, err := c.do(ctx, http.MethodDelete, "/v1/locks/"+key+"?owner="+url.QueryEscape(owner), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	return nil
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
