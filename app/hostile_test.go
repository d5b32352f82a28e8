//go:build linux

package app_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// openFDs counts the open file descriptors of process pid (Linux /proc).
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatalf("fds of %d: %v", pid, err)
	}
	return len(ents)
}

// ownerStatus runs `meshtray status` tries times and returns how many
// failed, with the first failure's output.
func ownerStatus(t *testing.T, n *apptest.Node, tries int) (failed int, first string) {
	t.Helper()
	for range tries {
		if r := n.CLI("status"); r.Code != 0 {
			if failed == 0 {
				first = fmt.Sprintf("exit %d: %s", r.Code, r.Stderr)
			}
			failed++
		}
	}
	return failed, first
}

// TestOwnerGetsThroughSilentFlood: 1,100 connections to the loopback port
// that never send a byte, renewed as the node drops them, do not keep the
// owner's `meshtray status` from the node, nor a stranger's next request
// from the port.
func TestOwnerGetsThroughSilentFlood(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	addr := "127.0.0.1:" + strconv.Itoa(n.Port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	const flood = 1100
	var opened sync.WaitGroup
	opened.Add(flood)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for ctx.Err() == nil { // renewed: a closed one is opened again
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if first {
					opened.Done()
					first = false
				}
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				context.AfterFunc(ctx, func() { c.Close() })
				c.Read(make([]byte, 1)) // until the node closes it
				c.Close()
			}
		}()
		if i%100 == 99 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	opened.Wait()
	time.Sleep(200 * time.Millisecond)
	if failed, first := ownerStatus(t, n, 10); failed > 0 {
		t.Errorf("owner's status under %d silent connections: %d of 10 failed; first: %s", flood, failed, first)
	}
	// The port itself: a new plain request evicts the oldest silent one.
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + addr + "/pair/issuer")
	if err != nil {
		t.Fatalf("GET /pair/issuer on the flooded port: %v", err)
	}
	resp.Body.Close()
}

// TestIdleFloodBounded: 2,000 keep-alive connections, each left idle after
// one public GET /pair/issuer, hold at most the loopback connection cap of
// the node's file descriptors, and the owner still gets through.
func TestIdleFloodBounded(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	base := openFDs(t, d.PID)
	addr := "127.0.0.1:" + strconv.Itoa(n.Port)
	const flood, workers = 2000, 32
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	jobs := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				fmt.Fprintf(c, "GET /pair/issuer HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err == nil {
					resp.Body.Close()
				}
				c.SetDeadline(time.Time{})
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	for range flood {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	held := openFDs(t, d.PID)
	if limit := base + 512 + 32; held > limit {
		t.Errorf("node holds %d fds after %d idle connections (%d before): over the cap %d", held, flood, base, limit)
	}
	if failed, first := ownerStatus(t, n, 3); failed > 0 {
		t.Errorf("owner's status under %d idle connections: %d of 3 failed; first: %s", flood, failed, first)
	}
	if !strings.Contains(n.Logs(), "connection limit reached") {
		t.Errorf("no log line says the connection limit was reached")
	}
}
