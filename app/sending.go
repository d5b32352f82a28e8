package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
	"meshtray/store"
)

// The transfers this node is sending are in the database (store.Sending,
// written by sendRun.record before the upload starts) so that a node
// killed mid-transfer (its sends are in-process: nothing resumes their
// uploads) cancels them at their receivers when it starts again: the
// receiver would otherwise keep the task, its partial files and the free
// space they hold for its whole idle bound (DefaultTransferIdle).

// sendingFile is where builds before the database record kept the sends
// under way; importSendingFile moves a leftover one into the database.
const sendingFile = "sending.json"

// sendingTimeout bounds one write of the record (a disk that stalls must
// not hold a send forever).
const sendingTimeout = 10 * time.Second

// importSendingFile puts the entries of a leftover sendingFile (a node
// updated mid-transfer) in the database and removes the file; a file that
// cannot be imported is kept for the next start. A torn file names
// nothing to cancel.
func importSendingFile(ctx context.Context, db *store.Store, stateDir string) error {
	path := filepath.Join(stateDir, sendingFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var old []struct {
		TaskID  string    `json:"task_id"`
		Device  string    `json:"device"`
		Name    string    `json:"name"`
		Started time.Time `json:"started"`
	}
	_ = json.Unmarshal(b, &old)
	for _, e := range old {
		err := db.PutSending(ctx, store.Sending{Device: e.Device, TaskID: e.TaskID, Name: e.Name, Started: e.Started})
		if err != nil && !errors.Is(err, store.ErrInvalid) {
			return err
		}
	}
	return os.Remove(path)
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
// of this node left under way (store.Sendings), each on its own goroutine,
// retried with backoff until it is done or the receiver's idle bound has
// passed since the send started; an entry is dropped once its task is
// canceled or ended.
func (n *Node) cancelStaleSends(stale []store.Sending) {
	for _, e := range stale {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.cancelStaleSend(e)
		}()
	}
}

func (n *Node) cancelStaleSend(e store.Sending) {
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
	n.unrecordSend(e.Device, e.TaskID)
}

// cancelAt is tasks/cancel of e's task at its device: nil once the task
// is canceled or ended there (or the device forgot it).
func (n *Node) cancelAt(e store.Sending) error {
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

// unrecordSend drops the send of task id at device from the record.
func (n *Node) unrecordSend(device, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), sendingTimeout)
	defer cancel()
	if err := n.db.DeleteSending(ctx, device, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		n.log.Warn("cannot update the record of sends under way", "task", id, "err", err)
	}
}
