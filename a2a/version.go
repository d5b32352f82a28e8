package a2a

import (
	"net/http"
	"strings"
)

// protoVersion is the A2A protocol version one request speaks. Both are
// served at RPCPath by the same engine; only the wire forms differ.
type protoVersion uint8

const (
	// v03 is A2A 0.3 (0.3.0): slash-style methods, "kind" discriminators,
	// lower-case states and roles, error data as an object.
	v03 protoVersion = iota
	// v10 is A2A 1.0: PascalCase methods, StreamResponse results,
	// TASK_STATE_* and ROLE_* values, error data as an array (§9).
	v10
)

// Version strings as the card's supportedInterfaces and the A2A-Version
// header spell them (A2A 1.0 §3.6: Major.Minor).
const (
	Version10 = "1.0"
	Version03 = "0.3"
	// VersionHeader is the request header (and query parameter) naming the
	// version a client speaks (A2A 1.0 §3.6.1).
	VersionHeader = "A2A-Version"
)

// SupportedVersions lists the versions this server speaks, newest first.
var SupportedVersions = []string{Version10, Version03}

// JSON-RPC method names of the A2A 1.0 JSON-RPC binding (A2A 1.0 §9.4).
const (
	MethodSendMessage          = "SendMessage"
	MethodSendStreamingMessage = "SendStreamingMessage"
	MethodGetTask              = "GetTask"
	MethodListTasks            = "ListTasks"
	MethodCancelTask           = "CancelTask"
	MethodSubscribeToTask      = "SubscribeToTask"
	MethodGetExtendedCard      = "GetExtendedAgentCard"
	MethodCreatePushConfig     = "CreateTaskPushNotificationConfig"
	MethodGetPushConfig        = "GetTaskPushNotificationConfig"
	MethodListPushConfigs      = "ListTaskPushNotificationConfigs"
	MethodDeletePushConfig     = "DeleteTaskPushNotificationConfig"
)

// requestVersion reads the version a request asks for (A2A 1.0 §3.6): the
// A2A-Version header, else the A2A-Version query parameter; neither means
// 0.3 (§3.6.2: a server MUST treat a request without one as 0.3). A patch
// component ("1.0.1", "0.3.0") is accepted, the comparison being on
// Major.Minor. ok is false, with the value as sent, for any other version.
func requestVersion(r *http.Request) (v protoVersion, asked string, ok bool) {
	asked = strings.TrimSpace(r.Header.Get(VersionHeader))
	if asked == "" && r.URL.RawQuery != "" {
		asked = strings.TrimSpace(r.URL.Query().Get(VersionHeader))
	}
	if asked == "" {
		return v03, "", true
	}
	mm := asked
	if major, rest, found := strings.Cut(asked, "."); found {
		if minor, _, hasPatch := strings.Cut(rest, "."); hasPatch {
			mm = major + "." + minor
		}
	}
	switch mm {
	case Version03:
		return v03, asked, true
	case Version10:
		return v10, asked, true
	}
	return v03, asked, false
}

// streamingMethod reports a method whose answer is an SSE stream, in
// either version: its errors are streams too (writeStreamError).
func streamingMethod(m string) bool {
	switch m {
	case MethodMessageStream, MethodTasksResubscribe, MethodSendStreamingMessage, MethodSubscribeToTask:
		return true
	}
	return false
}

// v03Method reports a method name of the 0.3 binding's style ("a/b"):
// errors about it that come before version dispatch are written in 0.3's
// form, so a 0.3 client can read them.
func v03Method(m string) bool { return strings.Contains(m, "/") }

// wantsStream reports a request that asked for an SSE answer (Accept:
// text/event-stream), for errors found before its method is known (a body
// over the limit, a broken envelope).
func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}
