package cli

import (
	"strings"
	"testing"
)

func TestSafeText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		multiline bool
		want      string
	}{
		{"device.info", false, "device.info"},
		{"héllo wörld ✓", false, "héllo wörld ✓"},
		{"clear\x1b[2Jscreen", false, `clear\u001B[2Jscreen`},
		{"osc52 \x1b]52;c;ZXZpbA==\x07", false, `osc52 \u001B]52;c;ZXZpbA==\u0007`},
		{"over\rwrite", false, `over\u000Dwrite`},
		{"rm -rf ~ \u202Efdp.txt", false, `rm -rf ~ \u202Efdp.txt`},
		{"zero\u200bwidth", false, `zero\u200Bwidth`},
		{"two\nlines\tand tab", true, "two\nlines\tand tab"},
		{"two\nlines", false, `two\u000Alines`},
		{"bad \xff utf8", false, "bad \uFFFD utf8"},
	}
	for _, tt := range tests {
		if got := safeText(tt.in, tt.multiline); got != tt.want {
			t.Errorf("safeText(%q, %v) = %q, want %q", tt.in, tt.multiline, got, tt.want)
		}
	}
}

func TestOneLineEscapesAndCuts(t *testing.T) {
	t.Parallel()
	got := oneLine("first \x1b[31mred\nsecond line", 200)
	if strings.ContainsRune(got, 0x1b) || strings.Contains(got, "second") || !strings.HasPrefix(got, `first \u001B[31mred`) {
		t.Fatalf("oneLine = %q", got)
	}
	if got := oneLine(strings.Repeat("x", 300), 10); len([]rune(got)) != 10 || !strings.HasSuffix(got, "…") {
		t.Fatalf("cut = %q", got)
	}
}
