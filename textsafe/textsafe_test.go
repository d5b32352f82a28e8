package textsafe

import (
	"strings"
	"testing"
)

func TestEscapeInvisible(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"device.info", "device.info"},
		{`C:\path "quoted" é 日本`, `C:\path "quoted" é 日本`},
		{"<b>&amp;</b>", "<b>&amp;</b>"}, // no markup escaping
		{"two\nlines", `two\u000Alines`},
		{"cr\rhere", `cr\u000Dhere`},
		{"tab\there", `tab\u0009here`},
		{"esc\x1b[31mred", `esc\u001B[31mred`},
		{"del\x7f", `del\u007F`},
		{"c1\u0085next", `c1\u0085next`},
		{"rlo\u202egpj.exe", `rlo\u202Egpj.exe`},
		{"isolates\u2066x\u2069", `isolates\u2066x\u2069`},
		{"zero\u200bwidth\ufeff", `zero\u200Bwidth\uFEFF`},
		{"line\u2028sep", `line\u2028sep`},
		{"nbsp\u00a0", `nbsp\u00A0`},
		{"tag\U000E0041", `tag\U000E0041`},
		{"bad\xffutf8", "bad\ufffdutf8"},
	}
	checkEscaper(t, "EscapeInvisible", EscapeInvisible, tests, func(in, got string) {
		if strings.ContainsAny(got, "\n\r") {
			t.Errorf("EscapeInvisible(%q) is not one line", in)
		}
	})
}

func TestEscapeInvisibleText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"first line\n\tindented\nlast", "first line\n\tindented\nlast"},
		{"crlf\r\nline", `crlf\u000D` + "\nline"},
		{"rlo\u202e\ngpj.exe", `rlo\u202E` + "\ngpj.exe"},
		{"esc\x1b[2J\nclear", `esc\u001B[2J` + "\nclear"},
		{"vt\vff\f", `vt\u000Bff\u000C`},
		{"sep\u2029para", `sep\u2029para`},
		{"bad\xc3\x28", "bad\ufffd("},
	}
	checkEscaper(t, "EscapeInvisibleText", EscapeInvisibleText, tests, func(in, got string) {
		// The multi-line form escapes a subset of what the one-line form
		// escapes: its output, made one line, is the one-line form.
		if one, want := EscapeInvisible(got), EscapeInvisible(in); one != want {
			t.Errorf("EscapeInvisible(EscapeInvisibleText(%q)) = %q, want %q", in, one, want)
		}
	})
}

// checkEscaper runs escape over tests: each result is the one wanted,
// escaping it again changes nothing, and check holds.
func checkEscaper(t *testing.T, name string, escape func(string) string, tests []struct{ in, want string }, check func(in, got string)) {
	t.Helper()
	for _, tt := range tests {
		got := escape(tt.in)
		if got != tt.want {
			t.Errorf("%s(%q) = %q, want %q", name, tt.in, got, tt.want)
		}
		if again := escape(got); again != got {
			t.Errorf("%s: escaping %q twice gave %q", name, got, again)
		}
		check(tt.in, got)
	}
}

func TestEscapeInvisibleCleanTextDoesNotAllocate(t *testing.T) {
	s := strings.Repeat("a plain line of text, é and 日本 included. ", 20)
	lines := s + "\n\t" + s
	allocs := testing.AllocsPerRun(100, func() {
		if EscapeInvisible(s) != s || EscapeInvisibleText(lines) != lines {
			t.Fatal("clean text changed")
		}
	})
	if allocs != 0 {
		t.Errorf("clean text: %.0f allocations per call, want 0", allocs)
	}
}

func BenchmarkEscapeInvisible(b *testing.B) {
	clean := strings.Repeat("device.info {\"a\":\"b\"} ", 10)
	dirty := strings.Repeat("rlo\u202egpj.exe\n", 10)
	b.Run("clean", func(b *testing.B) {
		for b.Loop() {
			EscapeInvisible(clean)
		}
	})
	b.Run("dirty", func(b *testing.B) {
		for b.Loop() {
			EscapeInvisible(dirty)
		}
	})
}
