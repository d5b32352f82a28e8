package jsonout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// htmlEscaping marshals itself with json.Marshal, which escapes HTML, as
// a2a-go's wire types do.
type htmlEscaping struct{ S string }

func (h htmlEscaping) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"s": h.S})
}

func TestMarshal(t *testing.T) {
	t.Parallel()
	// in is encoded; want is the JSON expected, to the letter.
	tests := []struct {
		name, want string
		in         any
	}{
		{"html kept", `{"q":"<b>Tom & Jerry</b>"}`, map[string]string{"q": "<b>Tom & Jerry</b>"}},
		{"nested marshaler undone", `[{"s":"a<b>&c"}]`, []any{htmlEscaping{"a<b>&c"}}},
		{"the text \\u003c stays", `{"q":"\\u003c"}`, map[string]string{"q": `\u003c`}},
		{"other escapes stay", `{"q":"tab\t\"q\" \u2028"}`, map[string]string{"q": "tab\t\"q\" \u2028"}},
		{"raw message as sent", `{"a":"<"}`, json.RawMessage(`{"a":"\u003c"}`)},
		{"no trailing newline", `42`, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("Marshal = %s, want %s", got, tt.want)
			}
			// The same value as encoding/json's form.
			std, _ := json.Marshal(tt.in)
			var a, b any
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("Marshal gave invalid JSON %s: %v", got, err)
			}
			_ = json.Unmarshal(std, &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("Marshal decodes to %#v, json.Marshal to %#v", a, b)
			}
		})
	}
	if _, err := Marshal(math.Inf(1)); err == nil {
		t.Fatal("Marshal(+Inf): no error")
	}
}

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"a":"x"}`, `{"a":"x"}`},
		{`{"a":"\u003ctitle\u003e \u0026 more"}`, `{"a":"<title> & more"}`},
		{`{"a":"\\u003c stays text"}`, `{"a":"\\u003c stays text"}`},
		{`{"a":"\\\u003c"}`, `{"a":"\\<"}`},
		{`{"a":"\u00e9\u2028\n\"q\""}`, `{"a":"\u00e9\u2028\n\"q\""}`},
		{`["\u003","\u00"]`, `["\u003","\u00"]`},
	}
	for _, tt := range tests {
		got := string(unescapeHTML([]byte(tt.in)))
		if got != tt.want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", tt.in, got, tt.want)
		}
		var a, b any
		if json.Unmarshal([]byte(tt.in), &a) == nil {
			if err := json.Unmarshal([]byte(got), &b); err != nil {
				t.Errorf("unescapeHTML(%s) is not JSON: %v", tt.in, err)
			} else if !reflect.DeepEqual(a, b) {
				t.Errorf("unescapeHTML(%s) changed the value: %#v vs %#v", tt.in, a, b)
			}
		}
	}
}

func TestMarshalIndent(t *testing.T) {
	t.Parallel()
	got, err := MarshalIndent(map[string]any{"a": []int{1}, "b": "x&y"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"a\": [\n    1\n  ],\n  \"b\": \"x&y\"\n}"; string(got) != want {
		t.Fatalf("MarshalIndent = %q, want %q", got, want)
	}
}

func checkHeaders(t *testing.T, h http.Header, ctype string) {
	t.Helper()
	for k, want := range map[string]string{
		"Content-Type":           ctype,
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Write(rec, http.StatusCreated, map[string]string{"url": "https://h/pair#c=1&n=2"})
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d, want 201", rec.Code)
	}
	checkHeaders(t, rec.Header(), "application/json")
	body := rec.Body.String()
	if want := `{"url":"https://h/pair#c=1&n=2"}` + "\n"; body != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(len(body)) {
		t.Fatalf("Content-Length %q for %d bytes", got, len(body))
	}
}

func TestWriteUnencodable(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Write(rec, http.StatusOK, map[string]any{"f": func() {}})
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	checkHeaders(t, rec.Header(), "application/json")
	var e ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("body %q: want {\"error\": ...} (%v)", rec.Body, err)
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusForbidden, `scope "full" needed & missing`)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("status %d, want 403", rec.Code)
	}
	checkHeaders(t, rec.Header(), "application/json")
	if want := `{"error":"scope \"full\" needed & missing"}` + "\n"; rec.Body.String() != want {
		t.Fatalf("body %q, want %q", rec.Body, want)
	}
}

// TestStreamFlushesEachValue: a client reads each value while the handler
// is still running, over a real HTTP connection.
func TestStreamFlushesEachValue(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := NewStream(w)
		for i := range 3 {
			if err := s.Send(map[string]any{"n": i, "s": "<&>"}); err != nil {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	checkHeaders(t, resp.Header, "application/x-ndjson")
	rd := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := readLine(rd, 10*time.Second)
		if err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if want := `{"n":` + strconv.Itoa(i) + `,"s":"<&>"}` + "\n"; line != want {
			t.Fatalf("value %d: %q, want %q", i, line, want)
		}
		next <- struct{}{} // the handler sends the next one only now
	}
	if rest, _ := io.ReadAll(rd); len(rest) != 0 {
		t.Fatalf("after the values: %q", rest)
	}
}

func readLine(rd *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := rd.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", io.ErrNoProgress
	}
}

func TestStreamSendError(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	s := NewStream(rec)
	if err := s.Send(math.NaN()); err == nil {
		t.Fatal("Send(NaN): no error")
	}
	if rec.Body.Len() != 0 {
		t.Fatalf("a value that does not encode wrote %q", rec.Body)
	}
}

func TestWriteLine(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	for _, v := range []any{map[string]string{"a": "<&>"}, []int{1, 2}} {
		if err := WriteLine(&b, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteLine(&b, math.Inf(-1)); err == nil {
		t.Fatal("WriteLine(-Inf): no error")
	}
	if want := `{"a":"<&>"}` + "\n[1,2]\n"; b.String() != want {
		t.Fatalf("WriteLine wrote %q, want %q", b.String(), want)
	}
}

func BenchmarkMarshal(b *testing.B) {
	v := map[string]any{"capability": "clipboard.read", "params": map[string]string{"text": "<b>x</b> & more"}}
	for b.Loop() {
		if _, err := Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}
