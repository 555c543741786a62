package baton

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
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// CodeUnexpected is the code of a *lockapi.Error made of an answer that is
// not the API's (no JSON error body): something else answers on the
// socket.
const CodeUnexpected = "unexpected"

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

// Stream is an open hold stream.
type Stream struct {
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc

	mu         sync.Mutex
	validUntil time.Time
}

// space is where a kind of line is in the API: its path, and the verb of
// its stream.
type space struct{ path, stream string }

// The spaces of the API.
var (
	locks     = space{path: "/v1/locks/", stream: ":hold"}
	elections = space{path: "/v1/elections/", stream: ":campaign"}
)

// Hold opens a hold stream for key. A refusal before any event (the lock is
// held and no wait was asked) is a *lockapi.Error.
func (c *Client) Hold(ctx context.Context, key string, req lockapi.Request) (*Stream, error) {
	return c.streamOf(ctx, locks, key, req)
}

// streamOf opens the stream of a line of sp: a hold, a campaign.
func (c *Client) streamOf(ctx context.Context, sp space, name string, req lockapi.Request) (*Stream, error) {
	body, dec, cancel, err := c.open(ctx, http.MethodPost, sp.path+name+sp.stream, req)
	if err != nil {
		return nil, err
	}
	return &Stream{body: body, dec: dec, cancel: cancel}, nil
}

// HoldOnConn is Hold on a connection of its own, which it also returns as
// a file (another descriptor of the same connection): a process given the
// file keeps the connection, and so the lock, open after the caller is
// gone. The sidecar sees the caller hang up only once every descriptor of
// the connection is closed. baton run gives it to the process that stops
// its command, so that its lock outlives baton run until the command's
// processes are gone.
func (c *Client) HoldOnConn(ctx context.Context, key string, req lockapi.Request) (*Stream, *os.File, error) {
	return c.streamOnConn(ctx, locks, key, req)
}

// streamOnConn is streamOf on a connection of its own (HoldOnConn).
func (c *Client) streamOnConn(ctx context.Context, sp space, name string, req lockapi.Request) (*Stream, *os.File, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the Baton sidecar at %s: %w", c.socket, err)
	}
	f, err := conn.(*net.UnixConn).File()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("keep the connection to the sidecar: %w", err)
	}
	var taken atomic.Bool
	one := &Client{socket: c.socket, http: &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if taken.Swap(true) {
				return nil, errors.New("the hold's connection is in use")
			}
			return conn, nil
		},
	}}}
	st, err := one.streamOf(ctx, sp, name, req)
	if err != nil {
		f.Close()
		conn.Close()
		return nil, nil, err
	}
	return st, f, nil
}

// open starts a streamed answer (a hold stream, a watch); an answer that
// is not 200 is a *lockapi.Error.
func (c *Client) open(ctx context.Context, method, path string, req any) (io.ReadCloser, *json.Decoder, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.do(ctx, method, path, req)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		return nil, nil, nil, decodeError(resp)
	}
	return resp.Body, json.NewDecoder(bufio.NewReader(resp.Body)), cancel, nil
}

// Next returns the next event; io.EOF when the stream ended. A stream of a
// granted lock that ends without a released or lost event (the sidecar
// crashed, the connection broke) ended the lock too: treat it as lost.
func (s *Stream) Next() (lockapi.Event, error) {
	ev, err := next[lockapi.Event](s.dec)
	if err == nil && ev.ValidFor > 0 {
		s.note(ev, time.Now())
	}
	return ev, err
}

// note takes in ev's valid_for_seconds, received at now: counted from when
// the sidecar sent it (its at), or from now if the clocks say it arrived
// before it was sent.
func (s *Stream) note(ev lockapi.Event, now time.Time) {
	transit := time.Duration(0)
	if !ev.At.IsZero() {
		transit = max(now.Round(0).Sub(ev.At), 0)
	}
	until := now.Add(time.Duration(ev.ValidFor*float64(time.Second)) - transit)
	s.mu.Lock()
	s.validUntil = until
	s.mu.Unlock()
}

// ValidUntil is, once the lock is granted, until when it is certainly
// still the caller's if nothing more is heard from the sidecar: the last
// granted or heartbeat event's valid_for_seconds, counted from when that
// event was sent. A holder that reaches it without another event must
// have stopped its work by then: the sidecar may be frozen or cut off
// from etcd, and the lock granted to someone else. Zero before the grant,
// and when the sidecar says nothing of it.
func (s *Stream) ValidUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// next decodes the next line of a stream; io.EOF when it ended.
func next[T any](dec *json.Decoder) (T, error) {
	var v T
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		var zero T
		return zero, err
	}
	return v, nil
}

// Close closes the stream: the sidecar releases the lock or withdraws the
// waiter.
func (s *Stream) Close() error {
	s.cancel()
	return s.body.Close()
}

// Finish records the outcome of a run-once holder's run of key and
// releases the lock (POST KEY:done).
func (c *Client) Finish(ctx context.Context, key string, d lockapi.Done) (lockapi.Run, error) {
	var run lockapi.Run
	resp, err := c.do(ctx, http.MethodPost, "/v1/locks/"+key+":done", d)
	if err != nil {
		return run, err
	}
	if resp.StatusCode != http.StatusOK {
		return run, decodeError(resp)
	}
	defer resp.Body.Close()
	return run, json.NewDecoder(resp.Body).Decode(&run)
}

// Release releases owner's lock of key.
func (c *Client) Release(ctx context.Context, key, owner string) (lockapi.Released, error) {
	return c.release(ctx, locks, key, owner)
}

// release lets go of owner's line name of sp: a lock's release, an
// election's resignation.
func (c *Client) release(ctx context.Context, sp space, name, owner string) (lockapi.Released, error) {
	var r lockapi.Released
	err := c.call(ctx, http.MethodDelete, sp.path+name+"?owner="+url.QueryEscape(owner), &r)
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
	e := &lockapi.Error{Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, e); err != nil || e.Code == "" {
		e.Code, e.Message = CodeUnexpected, fmt.Sprintf("unexpected answer: %.200s", b)
	}
	return e
}

// Status reads one lock.
func (c *Client) Status(ctx context.Context, key string) (lockapi.Status, error) {
	var st lockapi.Status
	err := c.call(ctx, http.MethodGet, "/v1/locks/"+key, &st)
	return st, err
}

// List reads the locks whose key starts with prefix.
func (c *Client) List(ctx context.Context, prefix string) (locks []lockapi.Status, truncated bool, err error) {
	var out lockapi.List
	path := "/v1/locks"
	if prefix != "" {
		path += "?prefix=" + url.QueryEscape(prefix)
	}
	err = c.call(ctx, http.MethodGet, path, &out)
	return out.Locks, out.Truncated, err
}

// ForceRelease frees key whoever holds it; fence, when not 0, must be the
// holder's. by names who asks, for the sidecar's log.
func (c *Client) ForceRelease(ctx context.Context, key string, fence int64, by string) (lockapi.Forced, error) {
	q := url.Values{"force": {"true"}}
	if fence != 0 {
		q.Set("fence", fmt.Sprint(fence))
	}
	if by != "" {
		q.Set("by", by)
	}
	var f lockapi.Forced
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

// Watcher is an open watch of locks.
type Watcher struct {
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
}

// Watch opens a watch of lock key, or with key "" of every lock whose key
// starts with prefix.
func (c *Client) Watch(ctx context.Context, key, prefix string) (*Watcher, error) {
	path := "/v1/locks:watch?prefix=" + url.QueryEscape(prefix)
	if key != "" {
		path = "/v1/locks/" + key + ":watch"
	}
	body, dec, cancel, err := c.open(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	return &Watcher{body: body, dec: dec, cancel: cancel}, nil
}

// Next returns the next event; io.EOF when the watch ended.
func (w *Watcher) Next() (lockapi.WatchEvent, error) { return next[lockapi.WatchEvent](w.dec) }

// Close ends the watch.
func (w *Watcher) Close() error {
	w.cancel()
	return w.body.Close()
}
