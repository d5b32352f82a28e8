package a2a

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"meshtray/jsonout"
)

// ListTasks page sizes (A2A 1.0 ListTasksRequest.pageSize: 1..100, 50 when
// unset).
const (
	DefaultListPageSize = 50
	MaxListPageSize     = 100
)

// listed is what ListTasks sorts and filters on, read under the task's lock.
type listed struct {
	t       *task
	created time.Time
	updated time.Time
	state   a2a.TaskState
}

// onList serves ListTasks (A2A 1.0 only): the caller's own tasks, never
// another owner's, newest first (by creation, so paging is stable while
// tasks change), filtered by contextId, status and statusTimestampAfter,
// pageSize at most MaxListPageSize, paged by an opaque cursor naming the
// last task of the previous page. historyLength works as in GetTask;
// artifacts are included only with includeArtifacts. totalSize counts the
// matching tasks across pages.
func (s *Server) onList(c *call) {
	var req a2av1.ListTasksRequest
	if err := decodeParams(c.params, &req); err != nil {
		c.fail(err)
		return
	}
	size := req.PageSize
	switch {
	case size == 0:
		size = DefaultListPageSize
	case size < 0 || size > MaxListPageSize:
		c.fail(newRPCError(CodeInvalidParams, "invalid params: pageSize must be between 1 and %d", MaxListPageSize))
		return
	}
	hl := -1
	if req.HistoryLength != nil {
		if hl = *req.HistoryLength; hl < 0 {
			c.fail(newRPCError(CodeInvalidParams, "invalid params: historyLength must be >= 0"))
			return
		}
	}
	var state a2a.TaskState
	if req.Status != a2av1.TaskStateUnspecified {
		if state = a2av0.FromV1TaskState(req.Status); state == a2a.TaskStateUnspecified {
			c.fail(newRPCError(CodeInvalidParams, "invalid params: unknown status %q", truncate(string(req.Status), 64)))
			return
		}
	}
	var after *cursor
	if req.PageToken != "" {
		cur, ok := parseCursor(req.PageToken)
		if !ok {
			c.fail(newRPCError(CodeInvalidParams, "invalid params: pageToken is not one this server handed out"))
			return
		}
		after = &cur
	}

	owner := c.p.Owner()
	s.mu.Lock()
	mine := make([]*task, 0, 16)
	for _, t := range s.tasks {
		if t.owner == owner {
			mine = append(mine, t)
		}
	}
	s.mu.Unlock()

	rows := make([]listed, 0, len(mine))
	for _, t := range mine {
		if req.ContextID != "" && t.contextID != req.ContextID {
			continue
		}
		t.mu.Lock()
		r := listed{t: t, created: t.created, updated: t.updated, state: t.status.State}
		t.mu.Unlock()
		if state != "" && r.state != state {
			continue
		}
		if req.StatusTimestampAfter != nil && !r.updated.After(*req.StatusTimestampAfter) {
			continue
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b listed) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(string(a.t.id), string(b.t.id))
	})
	start := 0
	if after != nil {
		start, _ = slices.BinarySearchFunc(rows, *after, func(r listed, cur cursor) int {
			if c := cur.created.Compare(r.created); c != 0 {
				return c
			}
			return strings.Compare(string(r.t.id), cur.id)
		})
		if start < len(rows) && string(rows[start].t.id) == after.id && rows[start].created.Equal(after.created) {
			start++
		}
	}
	end := min(start+size, len(rows))

	resp := a2av1.ListTasksResponse{Tasks: make([]*a2av1.Task, 0, end-start), TotalSize: len(rows), PageSize: size}
	commit := false
	for _, r := range rows[start:end] {
		r.t.mu.Lock()
		commit = s.revealLocked(r.t) || commit
		snap := r.t.snapshotLocked(hl)
		r.t.mu.Unlock()
		if !req.IncludeArtifacts {
			snap.Artifacts = nil
		}
		v, err := v1Task(snap)
		if err != nil {
			c.fail(err)
			return
		}
		resp.Tasks = append(resp.Tasks, v)
	}
	if end < len(rows) {
		last := rows[end-1]
		resp.NextPageToken = cursor{created: last.created, id: string(last.t.id)}.String()
	}
	data, err := jsonout.Marshal(resp)
	if err != nil {
		c.fail(err)
		return
	}
	if commit {
		if err := s.db.Commit(c.r.Context()); err != nil {
			s.log.Error("listed tasks not committed to the database", "err", err)
			c.fail(fmt.Errorf("%w: %w", ErrUnavailable, errDatabaseFailed))
			return
		}
	}
	writeJSON(c.w, c.ver, c.id, data, nil)
}

// cursor is a ListTasks page token: the creation time and id of the last
// task of the previous page. It names no owner: a token replayed by
// another caller pages through that caller's own tasks.
type cursor struct {
	created time.Time
	id      string
}

// String encodes the cursor: base64url of "<unix nanoseconds>.<task id>".
func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d.%s", c.created.UnixNano(), c.id))
}

func parseCursor(s string) (cursor, bool) {
	if len(s) > 256 {
		return cursor{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false
	}
	ns, id, ok := strings.Cut(string(b), ".")
	if !ok || id == "" {
		return cursor{}, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return cursor{}, false
	}
	return cursor{created: time.Unix(0, n), id: id}, true
}
