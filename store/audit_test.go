package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for the store.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func appendN(t *testing.T, s *Store, n int, mk func(i int) Entry) []Entry {
	t.Helper()
	var out []Entry
	for i := range n {
		e, err := s.Append(context.Background(), mk(i))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func decision(i int) Entry {
	return Entry{Kind: KindApproval, GrantID: fmt.Sprintf("g%d", i%3), Peer: "laptop", Via: "tailnet",
		Subject: fmt.Sprintf("request %d", i), Result: "approved", DecidedBy: "owner", DecidedVia: WhereCLI}
}

// The canonical form is exactly what Entry's docstring says: checked
// against bytes written out by hand and a SHA-256 computed here.
func TestCanonicalForm(t *testing.T) {
	e := Entry{
		Seq: 7, Time: time.Date(2026, 12, 1, 9, 30, 0, 5000, time.FixedZone("X", 3600)),
		Kind: KindCapability, GrantID: "0123456789abcdef", Peer: "Zoë <laptop>", Subject: "device.info",
		Result: "completed", Duration: 1500*time.Microsecond + 999*time.Nanosecond,
	}
	want := `{"duration_us":1500,"grant_id":"0123456789abcdef","kind":"capability","peer":"Zoë <laptop>",` +
		`"result":"completed","seq":7,"subject":"device.info","time":"2026-12-01T08:30:00.000005000Z","v":1}`
	got, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("canonical\n got %s\nwant %s", got, want)
	}
	var prev [32]byte
	prev[0] = 0xab
	h, _ := e.computeHash(prev)
	if h != sha256.Sum256(append(prev[:], want...)) {
		t.Fatal("hash is not SHA-256(prev || canonical)")
	}
}

func TestAuditAppendQueryVerify(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	path := tempDB(t)
	s, _ := Open(path, Options{Now: clock.Now})
	for i := range 10 {
		clock.Add(time.Minute)
		if _, err := s.Append(ctx, decision(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Append(ctx, Entry{Kind: "rumour"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown kind = %v", err)
	}
	if _, err := s.Append(ctx, Entry{Kind: KindLAN, Result: "off", DecidedVia: WhereTray}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Verify(ctx)
	if err != nil || v.Entries != 11 || v.First != 1 || v.Last != 11 {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
	s.Close()
	s = openTest(t, path, Options{Now: clock.Now})
	e, err := s.Append(ctx, Entry{Kind: KindA2A, Result: "on", DecidedVia: WhereCLI})
	if err != nil || e.Seq != 12 {
		t.Fatalf("append after reopen = %+v, %v", e, err)
	}
	if _, err := s.Verify(ctx); err != nil {
		t.Fatalf("chain across a restart: %v", err)
	}

	g1, _ := s.Query(ctx, Filter{GrantID: "g1"})
	if len(g1) != 3 || g1[0].Subject != "request 1" || g1[2].Subject != "request 7" {
		t.Fatalf("grant g1: %d entries", len(g1))
	}
	since, _ := s.Query(ctx, Filter{Since: time.Date(2026, 12, 1, 9, 8, 0, 0, time.UTC), Kind: KindApproval})
	if len(since) != 3 || since[0].Subject != "request 7" {
		t.Fatalf("since 09:08: %+v", since)
	}
	last2, _ := s.Query(ctx, Filter{Latest: true, Limit: 2})
	if len(last2) != 2 || last2[0].Seq != 11 || last2[1].Seq != 12 {
		t.Fatalf("latest 2: %+v", last2)
	}
	if last2[1].PrevHash != last2[0].Hash {
		t.Fatal("entries are not chained")
	}
}

func breakAndVerify(t *testing.T, tamper string, args ...any) *ChainError {
	t.Helper()
	ctx := context.Background()
	path := tempDB(t)
	s, _ := Open(path, Options{})
	appendN(t, s, 10, decision)
	s.Close()
	db := rawDB(t, path)
	if _, err := db.Exec(tamper, args...); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = openTest(t, path, Options{})
	_, err := s.Verify(ctx)
	var ce *ChainError
	if !errors.As(err, &ce) || !errors.Is(err, ErrChainBroken) {
		t.Fatalf("Verify after %q = %v, want a ChainError", tamper, err)
	}
	return ce
}

func TestVerifyFindsTampering(t *testing.T) {
	for _, c := range []struct {
		name   string
		sql    string
		seq    int64
		reason string
	}{
		{"edited result", "UPDATE audit SET result = 'denied' WHERE seq = 4", 4, "changed"},
		{"edited decider", "UPDATE audit SET decided_via = 'phone' WHERE seq = 1", 1, "changed"},
		{"edited time", "UPDATE audit SET time = time + 1 WHERE seq = 9", 9, "changed"},
		{"removed", "DELETE FROM audit WHERE seq = 6", 6, "missing"},
		{"removed two", "DELETE FROM audit WHERE seq IN (3, 4)", 3, "3 to 4 are missing"},
		{"removed newest", "DELETE FROM audit WHERE seq = 10", 10, "missing"},
		{"removed tail", "DELETE FROM audit WHERE seq >= 8", 8, "newest entries were removed"},
		{"removed oldest", "DELETE FROM audit WHERE seq = 1", 1, "missing"},
		{"emptied", "DELETE FROM audit", 1, "all entries were removed: the table is empty, and the chain head says 10 entries (1 to 10) should be there"},
		{"added", "INSERT INTO audit (seq, time, kind, prev_hash, hash) SELECT 11, time + 1, kind, hash, hash FROM audit WHERE seq = 10", 11, "past the chain head"},
		// Rewriting an entry and its own hash still breaks the next link.
		{"rehashed", "UPDATE audit SET subject = 'x', hash = zeroblob(32) WHERE seq = 5", 5, "changed"},
		{"relinked", "UPDATE audit SET prev_hash = zeroblob(32) WHERE seq = 7", 7, "link to entry 6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ce := breakAndVerify(t, c.sql)
			if ce.Seq != c.seq || !strings.Contains(ce.Error(), c.reason) {
				t.Fatalf("Verify named entry %d: %q; want entry %d, %q", ce.Seq, ce.Error(), c.seq, c.reason)
			}
		})
	}
}

// An entry recomputed consistently (content and hash) is found at the next
// entry, whose link no longer matches.
func TestVerifyFindsRecomputedEntry(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s, _ := Open(path, Options{})
	entries := appendN(t, s, 5, decision)
	s.Close()
	forged := entries[2]
	forged.Result = "denied"
	h, _ := forged.computeHash(forged.PrevHash)
	db := rawDB(t, path)
	if _, err := db.Exec("UPDATE audit SET result = 'denied', hash = ? WHERE seq = 3", h[:]); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = openTest(t, path, Options{})
	_, err := s.Verify(ctx)
	var ce *ChainError
	if !errors.As(err, &ce) || ce.Seq != 4 || !strings.Contains(ce.Reason, "entry 3 was changed") {
		t.Fatalf("Verify = %v, want entry 4 naming entry 3", err)
	}
}

func TestAuditRetentionKeepsChainVerifiable(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	path := tempDB(t)
	s, _ := Open(path, Options{AuditMaxEntries: 100, AuditMaxAge: 30 * 24 * time.Hour, Now: clock.Now})
	appendN(t, s, 250, decision)
	v, err := s.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Pruned in batches, down to 1 % under the bound: never over it.
	if v.Entries > 100 || v.Entries < 99 || v.Last != 250 || v.AnchorSeq != v.First-1 {
		t.Fatalf("after 250 appends with a bound of 100: %+v", v)
	}
	if n, err := s.PruneAudit(ctx); err != nil || n != 0 {
		t.Fatalf("PruneAudit within the bound = %d, %v", n, err)
	}
	// Age: entries older than 30 days go at the next append.
	clock.Add(31 * 24 * time.Hour)
	appendN(t, s, 3, decision)
	v, err = s.Verify(ctx)
	if err != nil || v.Entries != 3 || v.First != 251 || v.AnchorSeq != 250 {
		t.Fatalf("after aging out: %+v, %v", v, err)
	}
	s.Close()
	// The anchor survives a restart; removing the first kept entry is
	// still found.
	s = openTest(t, path, Options{AuditMaxEntries: 100, Now: clock.Now})
	if _, err := s.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("DELETE FROM audit WHERE seq = 251"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Verify(ctx)
	var ce *ChainError
	if !errors.As(err, &ce) || ce.Seq != 251 {
		t.Fatalf("Verify after removing the first kept entry = %v", err)
	}
}

func TestFollow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := openTest(t, tempDB(t), Options{})
	appendN(t, s, 3, decision) // g0, g1, g2
	got := make(chan Entry, 16)
	done := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() {
		done <- s.Follow(fctx, Filter{GrantID: "g1"}, func(e Entry) error {
			got <- e
			return nil
		})
	}()
	if e := <-got; e.Seq != 2 {
		t.Fatalf("first followed entry %d, want 2", e.Seq)
	}
	appendN(t, s, 6, decision) // seq 4..9: g0 g1 g2 g0 g1 g2 → g1 at 5 and 8
	for _, want := range []int64{5, 8} {
		select {
		case e := <-got:
			if e.Seq != want {
				t.Fatalf("followed %d, want %d", e.Seq, want)
			}
		case <-ctx.Done():
			t.Fatal("no entry followed")
		}
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow = %v", err)
	}

	// Latest: only the newest matching entries, then new ones.
	fctx, stop = context.WithCancel(ctx)
	defer stop()
	go func() {
		done <- s.Follow(fctx, Filter{Latest: true, Limit: 1}, func(e Entry) error {
			got <- e
			if e.Seq == 10 {
				return errors.New("enough")
			}
			return nil
		})
	}()
	if e := <-got; e.Seq != 9 {
		t.Fatalf("latest = %d, want 9", e.Seq)
	}
	appendN(t, s, 1, decision)
	if e := <-got; e.Seq != 10 {
		t.Fatalf("then %d, want 10", e.Seq)
	}
	if err := <-done; err == nil || err.Error() != "enough" {
		t.Fatalf("Follow = %v, want fn's error", err)
	}
}

// No secret in any entry: token-shaped strings in every field are
// redacted before they are hashed and written, so neither the database
// file nor a query has them.
func TestAuditRedactsSecrets(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s := openTest(t, path, Options{})
	grantToken := "mt1_0123456789abcdef_" + strings.Repeat("Ab3_-", 8) + "xyz"
	controlToken := "q0Zr8N3vY5uJm2Lk9XcTb6Wd1Hs4Fp7Ge0Ia3Ro5Qn8"
	jwt := "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.MEUCIQDx9kq2"
	secrets := []string{grantToken, controlToken, "hunter2-password", "K7M2-P9QX", "s3cr3tValue"}
	fields := []string{
		"Authorization: Bearer " + controlToken,
		`{"token":"` + grantToken + `","path":"/tmp/x"}`,
		"password=hunter2-password&user=me",
		"pairing code: K7M2-P9QX",
		"api_key='s3cr3tValue' and " + jwt,
		grantToken,
	}
	var last Entry
	for i, f := range fields {
		e, err := s.Append(ctx, Entry{Kind: KindCapability, Subject: "clipboard.write", Params: f,
			Peer: f, GrantID: f, Via: f, Result: f, DecidedBy: f, DecidedVia: f, TaskID: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{e.Params, e.Peer, e.GrantID, e.Via, e.Result, e.DecidedBy, e.DecidedVia, e.TaskID} {
			if !strings.Contains(v, Redacted) {
				t.Errorf("field %d kept %q", i, v)
			}
		}
		last = e
	}
	if !strings.Contains(last.Params, Redacted) {
		t.Fatal("bare token kept")
	}
	// Names that are not secret are kept.
	keep := "device ABCDEFG-HIJKLMN-OPQRSTU-VWXYZ23-4567ABC-DEFGHIJ-KLMNOPQ-RSTUVWX fp " +
		strings.Repeat("ab12", 16) + " task 3f2b8c1e-5d4a-4e7b-9c0d-1a2b3c4d5e6f"
	e, _ := s.Append(ctx, Entry{Kind: KindPairing, Subject: keep})
	if e.Subject != keep {
		t.Fatalf("non-secret names redacted: %q", e.Subject)
	}
	if _, err := s.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, suffix := range []string{"", "-wal"} {
		raw, _ := readFileIfAny(path + suffix)
		for _, sec := range secrets {
			if strings.Contains(string(raw), sec) {
				t.Errorf("%s holds a secret %q", DefaultFile+suffix, sec)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"plain text, nothing secret": "plain text, nothing secret",
		"Bearer abc.def":             "Bearer " + Redacted,
		`"code": "K7M2P9QX"`:         `"code": "` + Redacted + `"`,
		"sas=4821 next":              "sas=" + Redacted + " next",
		"client_secret: x y":         "client_secret: " + Redacted + " y",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFollowEndsAtClose(t *testing.T) {
	s, err := Open(tempDB(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(context.Background(), Filter{}, func(e Entry) error {
			close(started)
			return nil
		})
	}()
	appendN(t, s, 1, decision)
	<-started
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Follow after Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end at Close")
	}
}
