package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
	"meshtray/keychain"
)

// The transfers this node is sending, kept in the state dir so that a
// node killed mid-transfer (its sends are in-process: nothing resumes
// their uploads) cancels them at their receivers when it starts again:
// the receiver would otherwise keep the task, its partial files and the
// free space they hold for its whole idle bound (DefaultTransferIdle).

// sendingFile is the record's name in the state dir.
const sendingFile = "sending.json"

// sendingEntry is one send under way: the receiver's task and the device.
type sendingEntry struct {
	TaskID  string    `json:"task_id"`
	Device  string    `json:"device"` // the receiver's device ID
	Name    string    `json:"name"`   // its name, for the log
	Started time.Time `json:"started"`
}

// sendingLog is the record (sendingFile): every change is written (fsynced,
// renamed into place) before the send goes on.
type sendingLog struct {
	path string
	mu   sync.Mutex
	live []sendingEntry // guarded by mu
}

func openSendingLog(stateDir string) (*sendingLog, []sendingEntry) {
	l := &sendingLog{path: filepath.Join(stateDir, sendingFile)}
	var stale []sendingEntry
	if b, err := os.ReadFile(l.path); err == nil {
		_ = json.Unmarshal(b, &stale) // a torn record names nothing to cancel
	}
	return l, stale
}

// add records e; an error means the send is not recorded (it goes on).
func (l *sendingLog) add(e sendingEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live = append(l.live, e)
	return l.writeLocked()
}

// remove drops the entry of task id.
func (l *sendingLog) remove(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live = slices.DeleteFunc(l.live, func(e sendingEntry) bool { return e.TaskID == id })
	return l.writeLocked()
}

func (l *sendingLog) writeLocked() error {
	if len(l.live) == 0 {
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(l.live)
	if err != nil {
		return err
	}
	return keychain.WriteFile(l.path, b)
}

// stoppedSendText is what the receiver's task ends with when the sending
// node restarted during the transfer (tasks/cancel carries no reason: it
// is logged here).
const stoppedSendText = "the sending node stopped during the transfer; the receiver removes what it had received: send again"

// Retries of a stale send's cancel: the receiver may be down too; past
// its idle bound it ends the transfer by itself.
const (
	staleCancelFirst = 2 * time.Second
	staleCancelMax   = time.Minute
)

// cancelStaleSends cancels, at their receivers, the sends a previous run
// of this node left under way (sendingFile), each on its own goroutine,
// retried with backoff until it is done or the receiver's idle bound has
// passed since the send started; an entry is dropped once its task is
// canceled or ended.
func (n *Node) cancelStaleSends(stale []sendingEntry) {
	for _, e := range stale {
		n.sending.mu.Lock()
		n.sending.live = append(n.sending.live, e) // kept until canceled
		n.sending.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.cancelStaleSend(e)
		}()
	}
}

func (n *Node) cancelStaleSend(e sendingEntry) {
	giveUp := e.Started.Add(DefaultTransferIdle + time.Minute)
	pause := staleCancelFirst
	for {
		err := n.cancelAt(e)
		if err == nil {
			n.log.Warn("a file transfer this node was sending when it stopped is canceled at the receiver",
				"task", e.TaskID, "device", e.Name, "reason", stoppedSendText)
			break
		}
		if time.Now().After(giveUp) {
			n.log.Warn("cannot cancel a file transfer this node was sending when it stopped; the receiver ends it by itself",
				"task", e.TaskID, "device", e.Name, "err", err)
			break
		}
		n.log.Info("cannot cancel a file transfer left by the last run yet; trying again", "task", e.TaskID, "device", e.Name, "in", pause, "err", err)
		select {
		case <-n.ctx.Done():
			return // kept for the next start
		case <-time.After(pause):
		}
		pause = min(pause*2, staleCancelMax)
	}
	if err := n.sending.remove(e.TaskID); err != nil {
		n.log.Warn("cannot update the record of sends under way", "err", err)
	}
}

// cancelAt is tasks/cancel of e's task at its device: nil once the task
// is canceled or ended there (or the device forgot it).
func (n *Node) cancelAt(e sendingEntry) error {
	if n.deleg == nil || n.deleg.agents == nil {
		return errors.New("no delegation")
	}
	ctx, cancel := context.WithTimeout(n.ctx, 15*time.Second)
	defer cancel()
	sess, err := n.deleg.agents.Open(ctx, e.Device)
	if err != nil {
		return err
	}
	defer sess.Close()
	t, err := sess.Cancel(ctx, a2a.TaskID(e.TaskID))
	switch {
	case err == nil:
		if t != nil && !t.Status.State.Terminal() {
			return fmt.Errorf("the task is still %s", t.Status.State)
		}
		return nil
	case errors.Is(err, a2a.ErrTaskNotFound), errors.Is(err, a2a.ErrTaskNotCancelable),
		errors.Is(err, delegate.ErrAgentRefused), errors.Is(err, delegate.ErrAgentUnauthorized):
		return nil // ended (or gone) there: nothing holds it
	}
	return err
}
