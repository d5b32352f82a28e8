package assets

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPairPage checks what each path of the phone page answers and that
// every answer carries the security headers, refusals included.
func TestPairPage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(PairPage())
	defer srv.Close()
	tests := []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/pair", 200, "text/html; charset=utf-8", `<script src="/pair/app/pair.js" defer></script>`},
		{"HEAD", "/pair", 200, "text/html; charset=utf-8", ""},
		{"GET", "/pair/app/pair.js", 200, "text/javascript; charset=utf-8", "meshtray-sas-v1"},
		{"GET", "/pair/app/files.js", 200, "text/javascript; charset=utf-8", "ni:///sha-256;"},
		{"GET", "/pair/app/sha256.min.js", 200, "text/javascript; charset=utf-8", "@license MIT"},
		{"GET", "/pair/app/pair.css", 200, "text/css; charset=utf-8", "prefers-color-scheme"},
		{"GET", "/pair", 200, "text/html; charset=utf-8", `<script src="/pair/app/approvals.js" defer></script>`},
		{"GET", "/pair/app/approvals.js", 200, "text/javascript; charset=utf-8", "/remote/approvals/events"},
		{"GET", "/pair/app/approvals.css", 200, "text/css; charset=utf-8", ".approval-buttons"},
		{"GET", "/pair/app/icon.png", 200, "image/png", "\x89PNG"},
		{"GET", "/pair/app/", 404, "", ""},
		{"GET", "/pair/app/../assets.go", 404, "", ""},
		{"GET", "/pair/app/index.html", 404, "", ""},
		{"GET", "/pair/app/pair.js.map", 404, "", ""},
		{"POST", "/pair", 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			want := map[string]string{
				"Content-Security-Policy": PairCSP,
				"X-Frame-Options":         "DENY",
				"Referrer-Policy":         "no-referrer",
				"Cache-Control":           "no-store",
				"X-Content-Type-Options":  "nosniff",
			}
			if tc.ctype != "" {
				want["Content-Type"] = tc.ctype
			}
			for k, v := range want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if tc.body != "" && !strings.Contains(string(b), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if tc.method == "HEAD" && len(b) != 0 {
				t.Errorf("HEAD answered a body of %d bytes", len(b))
			}
		})
	}
}

// TestPairPageNoInlineCode: the CSP forbids inline scripts, styles and
// event handlers, so the HTML must carry none (the browser would refuse
// them and the page would break silently).
func TestPairPageNoInlineCode(t *testing.T) {
	t.Parallel()
	html := string(pairFiles[PairPath].body)
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", " onload=", " onsubmit=", "javascript:", "http://", "https://"} {
		if strings.Contains(html, bad) {
			t.Errorf("index.html contains %q, which the CSP forbids or which loads from elsewhere", bad)
		}
	}
	for _, name := range []string{"pair.js", "approvals.js"} {
		js := string(pairFiles[PairAppPrefix+name].body)
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "?token=", "?code="} {
			if strings.Contains(js, bad) {
				t.Errorf("%s uses %q: remote text must go in with textContent, secrets never in a URL", name, bad)
			}
		}
	}
	if !strings.Contains(PairCSP, "script-src 'self'") || strings.Contains(PairCSP, "unsafe") {
		t.Errorf("CSP %q is not strict", PairCSP)
	}
}
