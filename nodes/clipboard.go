package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

const (
	// MaxClipboardBytes bounds clipboard text both ways: what clipboard.read
	// returns (longer text is cut, marked truncated) and what
	// clipboard.write accepts (65536 characters, at most 4 bytes each).
	MaxClipboardBytes = 256 << 10
	maxClipboardChars = MaxClipboardBytes / utf8.UTFMax
	// clipboardTimeout bounds one clipboard tool run.
	clipboardTimeout = 5 * time.Second
)

// ClipboardText is clipboard.read's result.
type ClipboardText struct {
	Text      string `json:"text"`
	Bytes     int    `json:"bytes"`     // length of Text in bytes (UTF-8)
	Truncated bool   `json:"truncated"` // the clipboard held more than MaxClipboardBytes
}

// ClipboardWrite is clipboard.write's parameters.
type ClipboardWrite struct {
	Text string `json:"text"`
}

func clipboardReadCapability(c *clipboard) *capability {
	return &capability{
		Capability: Capability{
			Name:        CapClipboardRead,
			Description: fmt.Sprintf("Read the text on this device's clipboard (at most %d KiB).", MaxClipboardBytes>>10),
			Params:      json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{},"additionalProperties":false}`),
			Result: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["text","bytes","truncated"],
"properties":{"text":{"type":"string"},"bytes":{"type":"integer","minimum":0},"truncated":{"type":"boolean"}}}`),
			Effects: EffectRead,
		},
		available: c.available,
		run: func(ctx context.Context, _ Call, _ json.RawMessage) (Result, error) {
			ctx, cancel := context.WithTimeout(ctx, clipboardTimeout)
			defer cancel()
			text, truncated, err := c.read(ctx)
			if err != nil {
				return Result{}, fmt.Errorf("clipboard.read: %w", err)
			}
			summary := fmt.Sprintf("read %d bytes from the clipboard", len(text))
			if truncated {
				summary += " (truncated)"
			}
			return marshalResult(ClipboardText{Text: text, Bytes: len(text), Truncated: truncated}, summary)
		},
	}
}

func clipboardWriteCapability(c *clipboard) *capability {
	return &capability{
		Capability: Capability{
			Name:        CapClipboardWrite,
			Description: "Put text on this device's clipboard.",
			Params: json.RawMessage(fmt.Sprintf(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["text"],"additionalProperties":false,
"properties":{"text":{"type":"string","maxLength":%d}}}`, maxClipboardChars)),
			Result: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["written","bytes"],
"properties":{"written":{"type":"boolean"},"bytes":{"type":"integer","minimum":0}}}`),
			Effects: EffectWrite,
		},
		available: c.available,
		// The text may be a password: the record says how much was written.
		auditParams: func(raw json.RawMessage) string {
			var p ClipboardWrite
			if json.Unmarshal(raw, &p) != nil {
				return AuditParams(raw)
			}
			return fmt.Sprintf(`{"text":"(%d bytes)"}`, len(p.Text))
		},
		run: func(ctx context.Context, _ Call, raw json.RawMessage) (Result, error) {
			var p ClipboardWrite
			if err := json.Unmarshal(raw, &p); err != nil {
				return Result{}, err
			}
			ctx, cancel := context.WithTimeout(ctx, clipboardTimeout)
			defer cancel()
			if err := c.write(ctx, p.Text); err != nil {
				return Result{}, fmt.Errorf("clipboard.write: %w", err)
			}
			return marshalResult(struct {
				Written bool `json:"written"`
				Bytes   int  `json:"bytes"`
			}{true, len(p.Text)}, fmt.Sprintf("wrote %d bytes to the clipboard", len(p.Text)))
		},
	}
}

// cutUTF8 returns b cut to at most max bytes without splitting a UTF-8
// sequence, and whether it cut anything.
func cutUTF8(b []byte, max int) ([]byte, bool) {
	if len(b) <= max {
		return b, false
	}
	b = b[:max]
	// If the last rune starts within the final UTFMax bytes and is
	// incomplete, drop it.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return b, true
}
