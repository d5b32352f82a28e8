package delegate

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/cardsig"
	"meshtray/keychain"
	"meshtray/pairing"
)

// The cards and replies of agents people run (testdata/cards,
// testdata/replies): what meshtray accepts, how it reads it, and what it
// refuses, naming the version or field.

func TestCardsOfEveryVersion(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://agent.example.com")
	for _, tc := range []struct {
		file     string
		version  string // the version calls use; "" = refused
		endpoint string // the endpoint's path
		note     string // a substring of the notes (or "")
		refusal  string // a substring of the refusal
	}{
		{file: "v0.3.0.json", version: Version03, endpoint: "/a2a"},
		{file: "no-protocolVersion.json", version: Version03, endpoint: "/a2a", note: "no protocolVersion: read as 0.3.0"},
		{file: "v0.2.9.json", version: Version03, endpoint: "/", note: "protocolVersion 0.2.9: spoken to as 0.3"},
		{file: "v1.0.json", version: Version10, endpoint: "/a2a/v1"},
		{file: "dual.json", version: Version10, endpoint: "/a2a/v1"},
		{file: "v1.1.json", version: Version10, endpoint: "/a2a/v1"},
		{file: "v0.3-interfaces-only.json", version: Version03, endpoint: "/rpc"},
		{file: "oauth2-or-bearer.json", version: Version03, endpoint: "/a2a"},
		{file: "v0.1-authentication.json", refusal: "A2A 0.1's authentication field and no protocolVersion: an agent from before 0.2 (tasks/send)"},
		{file: "v0.1.0.json", refusal: "protocolVersion 0.1.0 predates A2A 0.2 (tasks/send)"},
		{file: "rest-and-grpc-only.json", refusal: "no JSON-RPC interface: the card offers HTTP+JSON, GRPC"},
		{file: "v0.3-grpc-preferred-rest.json", refusal: "no JSON-RPC interface: the card offers GRPC, HTTP+JSON"},
		{file: "v2.0-jsonrpc.json", refusal: `supportedInterfaces offers JSONRPC with protocolVersion "2.0"; meshtray speaks A2A 0.3 and 1.0`},
		{file: "oauth2.json", refusal: `requires OAuth 2.0 ("google"); meshtray sends bearer tokens only`},
		{file: "oidc-v1.0.json", refusal: `requires OpenID Connect ("sso"); meshtray sends bearer tokens only`},
		{file: "apikey.json", refusal: `requires an API key ("key"); meshtray sends bearer tokens only`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(filepath.Join("testdata/cards", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			info, err := VerifyCard(raw, base)
			if tc.version == "" {
				if !errors.Is(err, ErrCardInvalid) || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("VerifyCard = %+v, %v; want a refusal with %q", info, err, tc.refusal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.ProtocolVersion != tc.version || info.Endpoint != "https://agent.example.com"+tc.endpoint || info.Signature != "unsigned" {
				t.Fatalf("info %+v: want %s at %s, unsigned", info, tc.version, tc.endpoint)
			}
			if notes := strings.Join(info.Notes, "; "); tc.note != "" && !strings.Contains(notes, tc.note) || tc.note == "" && notes != "" {
				t.Fatalf("notes %q, want %q", notes, tc.note)
			}
		})
	}
}

func testIdentity(t *testing.T, name string) *pairing.Identity {
	t.Helper()
	id, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSignedCards: an external card that is signed says so, a tampered
// one is refused; a paired device's card must be signed by the
// certificate it paired with (else it is refused like a pin mismatch).
func TestSignedCards(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://agent.example.com")
	raw, err := os.ReadFile("testdata/cards/dual.json")
	if err != nil {
		t.Fatal(err)
	}
	laptop, stranger := testIdentity(t, "laptop"), testIdentity(t, "stranger")
	signed, err := cardsig.SignAs(raw, laptop)
	if err != nil {
		t.Fatal(err)
	}
	info, err := VerifyCard(signed, base)
	if err != nil || info.Signature != "signed" || info.SignedBy != laptop.ID.String() {
		t.Fatalf("signed card: %+v, %v", info, err)
	}
	tampered := []byte(strings.Replace(string(signed), `"name":"Union"`, `"name":"Unioη"`, 1))
	if _, err := VerifyCard(tampered, base); !errors.Is(err, ErrCardInvalid) || !strings.Contains(err.Error(), "invalid signature") {
		t.Fatalf("tampered card: %v", err)
	}
	if info, err := verifyCardOfPeer(signed, base, laptop.ID); err != nil || info.Signature != "signed" {
		t.Fatalf("the peer's own signature: %+v, %v", info, err)
	}
	if info, err := verifyCardOfPeer(raw, base, laptop.ID); err != nil || info.Signature != "unsigned" {
		t.Fatalf("an unsigned peer card (an older meshtray): %+v, %v", info, err)
	}
	bySomeoneElse, err := cardsig.SignAs(raw, stranger)
	if err != nil {
		t.Fatal(err)
	}
	_, err = verifyCardOfPeer(bySomeoneElse, base, laptop.ID)
	if !errors.Is(err, pairing.ErrPinMismatch) {
		t.Fatalf("a peer card signed by another device: %v", err)
	}
	if c := classify("laptop", true, err); !errors.Is(c, pairing.ErrPinMismatch) || !strings.Contains(c.Error(), "not signed by the certificate it paired with") {
		t.Fatalf("classified: %v", c)
	}
	if _, err := verifyCardOfPeer(tampered, base, laptop.ID); !errors.Is(err, pairing.ErrPinMismatch) {
		t.Fatalf("a tampered peer card: %v", err)
	}
}

// replay is an agent that answers every JSON-RPC call with a recorded
// reply (Content-Type text/event-stream for .sse files, else
// application/json).
func replay(t *testing.T, file string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata/replies", file))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(file, ".sse") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if strings.HasPrefix(file, "http400-") { // a2a-js: parse errors with HTTP 400
			w.WriteHeader(http.StatusBadRequest)
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRecordedReplies(t *testing.T) {
	t.Parallel()
	ms := time.UnixMilli(1764576000123).UTC()
	for _, tc := range []struct {
		file    string
		v1      bool
		stream  bool
		at      time.Time // the status timestamp read (zero: not checked)
		code    int       // the JSON-RPC error expected (0: the task completes with "42")
		is      error     // a sentinel the error wraps
		message string    // a substring of the error
	}{
		{file: "numeric-id.json", at: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)},
		{file: "timestamp-no-offset.json", at: time.Date(2025, 4, 2, 16, 59, 25, 331844000, time.UTC)},
		{file: "timestamp-epoch-ms.json", at: ms},
		{file: "timestamp-epoch-s.json", at: time.Unix(1764576000, 0)},
		{file: "timestamp-offset.json", at: time.Date(2026, 12, 1, 8, 0, 0, 5e8, time.UTC)},
		{file: "no-kind.json"},
		{file: "error-data-array.json", code: -32602, is: a2a.ErrInvalidParams, message: "Invalid parameters (JSON-RPC -32602)"},
		{file: "error-data-string.json", code: -32001, is: a2a.ErrTaskNotFound, message: "Task not found (JSON-RPC -32001)"},
		{file: "error-errorinfo.json", code: -32001, is: a2a.ErrTaskNotFound, message: "Task not found: t9 (JSON-RPC -32001, TASK_NOT_FOUND)"},
		{file: "http400-jsonrpc-error.json", code: -32700, is: a2a.ErrParseError, message: "Parse error: Unexpected token } in JSON at position 12 (JSON-RPC -32700)"},
		{file: "http400-jsonrpc-error.json", stream: true, code: -32700, is: a2a.ErrParseError, message: "(JSON-RPC -32700)"},
		{file: "stream-plain-json-error.json", stream: true, code: -32010, message: "too many live tasks for this grant (16); wait for one to finish or cancel one (JSON-RPC -32010)"},
		{file: "stream-data-no-space.sse", stream: true, at: ms},
		{file: "stream-multiline-crlf-no-kind.sse", stream: true},
		{file: "stream-error-event.sse", stream: true, code: -32603, message: "the model provider is down (JSON-RPC -32603)"},
		{file: "stream-error-first.sse", stream: true, code: -32010, message: "too many live tasks for this grant (16) (JSON-RPC -32010)"},
		{file: "v1-send-numeric-id.json", v1: true, at: ms},
		{file: "v1-stream.sse", v1: true, stream: true, at: time.Unix(1764576000, 0)},
		{file: "v1-error-mixed-data.json", v1: true, code: -32001, is: a2a.ErrTaskNotFound, message: "Task not found (JSON-RPC -32001, TASK_NOT_FOUND)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			card := CardInfo{Name: "recorded", Endpoint: replay(t, tc.file), ProtocolVersion: Version03, Streaming: tc.stream}
			if tc.v1 {
				card.ProtocolVersion = Version10
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			ctx := context.Background()
			rem, err := newRemote(ctx, "recorded", false, card, tr, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rem.Close()
			var status a2a.TaskStatus
			var at artifactTracker
			var arts []string
			err = rem.exchange(ctx, &a2a.MessageSendParams{Message: userMsg("hi")}, tc.stream, nil, func(ev a2a.Event) {
				add := func(a *a2a.Artifact) { arts = append(arts, partsText(a.Parts)) }
				switch e := ev.(type) {
				case *a2a.Task:
					status = e.Status
					at.snapshot(e, add, func(*a2a.Artifact, a2a.ContentParts) {})
				case *a2a.TaskStatusUpdateEvent:
					status = e.Status
				case *a2a.TaskArtifactUpdateEvent:
					at.update(e, add, func(*a2a.Artifact, a2a.ContentParts) {})
				}
			})
			if tc.code != 0 {
				var re *RPCError
				if !errors.As(err, &re) || re.Code != tc.code || !strings.Contains(err.Error(), tc.message) ||
					!errors.Is(err, ErrAgentRefused) || tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("error %v (%T), want code %d with %q", err, err, tc.code, tc.message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if status.State != a2a.TaskStateCompleted || len(arts) != 1 || arts[0] != "42" {
				t.Fatalf("status %+v, artifacts %q", status, arts)
			}
			if !tc.at.IsZero() && (status.Timestamp == nil || !status.Timestamp.Equal(tc.at)) {
				t.Fatalf("timestamp %v, want %v", status.Timestamp, tc.at)
			}
		})
	}
}

// TestNormalizeLeavesSendersJSONAlone: metadata and data parts are the
// sender's own; a kind or timestamp inside them is not touched.
func TestNormalizeLeavesSendersJSONAlone(t *testing.T) {
	t.Parallel()
	in := `{"jsonrpc":"2.0","id":"1","result":{"id":"t","contextId":"c","status":{"state":"completed"},"metadata":{"timestamp":"soon","parts":[{"text":"x"}]},"history":[{"messageId":"m","role":"user","parts":[{"data":{"timestamp":"later","messageId":"x","parts":[]}}]}]}}`
	out, err := normalizeResponse([]byte(in), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"timestamp":"soon"`, `"timestamp":"later"`, `"parts":[{"text":"x"}]`, `"data":{"messageId":"x","parts":[],"timestamp":"later"}`, `"kind":"data"`, `"kind":"task"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("%s lacks %s", out, want)
		}
	}
}
