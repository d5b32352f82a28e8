package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrNotRunning is returned by Dial and by client calls when no node runs on
// the state dir (no daemon.json, a daemon.json left by a node that died, or
// nothing listening).
var ErrNotRunning = errors.New("meshtray is not running")

// WrongPortError is Dial's refusal of a port other than the one the state
// dir's node listens on: the control token is not sent to whatever holds
// that port. It unwraps to ErrNotRunning.
type WrongPortError struct {
	Port     int // asked for (--port)
	NodePort int // where the node of StateDir listens
	StateDir string
}

func (e *WrongPortError) Error() string {
	return fmt.Sprintf("no meshtray on port %d; the node of this state dir (%s) listens on %d (drop --port, or use --port %d)", e.Port, e.StateDir, e.NodePort, e.NodePort)
}

func (e *WrongPortError) Unwrap() error { return ErrNotRunning }

// APIError is an error answered by the control API: its HTTP status and the
// `error` text of its JSON body.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// Client talks to a running node's local control API over loopback as the
// local owner (the control token from daemon.json). The CLI and the UI
// process use it; it never goes beyond 127.0.0.1. Its LogValue leaves the
// token out.
type Client struct {
	base  string // http://127.0.0.1:PORT
	token string
	hc    *http.Client
	// StateDir is where the node was found, for messages.
	StateDir string
}

// Dial finds the node running on stateDir. The node must really run: its
// daemon.json present and the state dir's lock held (a daemon.json left by
// a node that was killed is not trusted: another program may hold its port
// by now); else ErrNotRunning. port, when not 0, must be the port the node
// published (*WrongPortError otherwise): the control token goes to this
// state dir's node and nowhere else.
func Dial(stateDir string, port int) (*Client, error) {
	d, err := ReadDaemonInfo(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (state dir %s)", ErrNotRunning, stateDir)
	}
	if err != nil {
		return nil, err
	}
	if !stateLockHeld(stateDir) {
		return nil, fmt.Errorf("%w (state dir %s: its daemon.json is left from a node that stopped without cleaning up)", ErrNotRunning, stateDir)
	}
	if port != 0 && port != d.Port {
		return nil, &WrongPortError{Port: port, NodePort: d.Port, StateDir: stateDir}
	}
	port = d.Port
	return &Client{
		base:     "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		token:    d.Token,
		hc:       &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}},
		StateDir: stateDir,
	}, nil
}

// LogValue implements slog.LogValuer without the control token.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base", c.base), slog.String("state_dir", c.StateDir))
}

// BaseURL is the node's loopback base URL.
func (c *Client) BaseURL() string { return c.base }

// Do sends a JSON request (in may be nil) and decodes the JSON answer into
// out (may be nil). Non-2xx answers become *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%w (nothing answers on %s; state dir %s)", ErrNotRunning, c.base, c.StateDir)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
			if e.Error == "" {
				e.Error = resp.Status
			}
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, out)
}

// Events streams change notices from GET /events until ctx ends or the
// connection drops; each call of fn gets the changed types.
func (c *Client) Events(ctx context.Context, fn func([]EventType)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &APIError{Status: resp.StatusCode, Message: resp.Status}
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Types []EventType `json:"types"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		fn(ev.Types)
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}

// WaitReady polls GET /status until the node answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var st Status
		err := c.Do(ctx, http.MethodGet, "/status", nil, &st)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not ready: %w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// pathEscape escapes one path segment (ids are URL-safe already; this keeps
// a hostile id from changing the path).
func pathEscape(s string) string { return url.PathEscape(s) }
