package app

import (
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
	"os"
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

// OtherUserError is Dial's answer when the node of StateDir runs as
// another user than this process: its state dir, daemon.json and control
// socket admit only that user (the socket checks each peer's uid), so
// nothing this process sends would be served.
type OtherUserError struct {
	StateDir string
	UID      int // the node's user; -1 when not known
}

func (e *OtherUserError) Error() string {
	who := "another user"
	if e.UID >= 0 {
		who = fmt.Sprintf("another user (uid %d)", e.UID)
	}
	return fmt.Sprintf("the node of state dir %s runs as %s; only that user can control it: run this command as that user (this one is uid %d)", e.StateDir, who, os.Getuid())
}

// otherUser is the *OtherUserError for stateDir, naming the owner of path
// when it can be read.
func otherUser(stateDir, path string) *OtherUserError {
	e := &OtherUserError{StateDir: stateDir, UID: -1}
	if fi, err := os.Stat(path); err == nil {
		if uid, ok := fileUID(fi); ok {
			e.UID = int(uid)
		}
	}
	return e
}

// APIError is an error answered by the control API: its HTTP status and the
// `error` text of its JSON body.
type APIError struct {
	Status  int
	Message string
	body    []byte // the JSON body (at most 64 KiB), for the calls whose errors carry more
}

func (e *APIError) Error() string { return e.Message }

// Client talks to a running node's local control API as the local owner
// (the control token from daemon.json): over the node's control socket
// where daemon.json names one (a flood on the loopback port does not reach
// it), else over the loopback port. The CLI, the tray and the UI process
// use it; it never goes beyond this machine. Its LogValue leaves the token
// out.
type Client struct {
	base  string // http://127.0.0.1:PORT
	token string
	hc    *http.Client
	// StateDir is where the node was found, for messages.
	StateDir string
	// Where this client's owner acts from (store.WhereCLI, WhereTray,
	// WherePhone): sent as the where of the A2A and LAN switches and of
	// grant changes that name none, for the audit trail. Set it before
	// the first request.
	Where  string
	socket string // control socket path; "" = the loopback port
}

// Dial finds the node running on stateDir. The node must really run: its
// daemon.json present and the state dir's lock held (a daemon.json left by
// a node that was killed is not trusted: another program may hold its port
// by now); else ErrNotRunning. port, when not 0, must be the port the node
// published (*WrongPortError otherwise): the control token goes to this
// state dir's node and nowhere else. A node of another user (its state dir
// unreadable, or its control socket another uid's) is *OtherUserError.
func Dial(stateDir string, port int) (*Client, error) {
	d, err := ReadDaemonInfo(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (state dir %s)", ErrNotRunning, stateDir)
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, otherUser(stateDir, stateDir)
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
	tr := &http.Transport{Proxy: nil, DisableCompression: true}
	if d.Socket != "" {
		// The socket refuses a peer of another uid by closing the
		// connection unserved (a reset to the client); say why instead.
		if fi, err := os.Stat(d.Socket); err == nil && !ownedByMe(fi) {
			return nil, otherUser(stateDir, d.Socket)
		}
		// Every request goes to the socket whatever the URL says; the URL
		// keeps naming the loopback port so Host passes the node's check
		// and messages name the node as before.
		var dialer net.Dialer
		sock := d.Socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", sock)
		}
	}
	return &Client{
		base:     "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		token:    d.Token,
		hc:       &http.Client{Transport: tr},
		StateDir: stateDir,
		socket:   d.Socket,
	}, nil
}

// Socket is the control socket the client talks to, "" when it uses the
// loopback port.
func (c *Client) Socket() string { return c.socket }

// LogValue implements slog.LogValuer without the control token.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base", c.base), slog.String("state_dir", c.StateDir))
}

// BaseURL is the node's loopback base URL.
func (c *Client) BaseURL() string { return c.base }

// Do sends a JSON request (in may be nil) to path and decodes the JSON
// answer into out (may be nil). Non-2xx answers become *APIError. The typed
// methods (client_api.go) are the way to the control API; Do stays for
// tests that probe a route with a body no typed method sends.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, out)
}

// send sends one request with the control token and, when in is not nil,
// in as its JSON body. A refused connection is ErrNotRunning; an answer
// other than 2xx is read (64 KiB at most) into an *APIError. On success the
// caller closes the body.
func (c *Client) send(ctx context.Context, method, path string, in any, accept string) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" && c.socket != "" && errors.Is(err, fs.ErrPermission) {
			return nil, otherUser(c.StateDir, c.socket)
		}
		if errors.As(err, &op) && op.Op == "dial" {
			where := c.base
			if c.socket != "" {
				where = c.socket
			}
			return nil, fmt.Errorf("%w (nothing answers on %s; state dir %s)", ErrNotRunning, where, c.StateDir)
		}
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
			if e.Error == "" {
				e.Error = resp.Status
			}
		}
		return nil, &APIError{Status: resp.StatusCode, Message: e.Error, body: b}
	}
	return resp, nil
}

// WaitReady polls GET /status until the node answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		_, err := c.Status(ctx)
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
