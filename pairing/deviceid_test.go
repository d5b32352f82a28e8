package pairing

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// syncthingID is a device ID from Syncthing's own tests
// (lib/protocol/deviceid_test.go): our string form must be theirs.
const syncthingID = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"

func TestParseDeviceIDForms(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		syncthingID,
		"P56IOI7 MZJNU2Y IQGDREY DM2MGTI MGL3BXN PQ6W5BM TBBZ4TJ XZWICQ2",
		"P56IOI7MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMTBBZ4TJXZWICQ2",
		"p56ioi7mzjnu2yiqgdreydm2mgtimgl3bxnpq6w5bmtbbz4tjxzwicq2",
		"P561017MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMT88Z4TJXZWICQ2", // 0/1/8 typos
		"p561017mzjnu2yiqgdreydm2mgtimgl3bxnpq6w5bmt88z4tjxzwicq2",
		"P56-IOI7MZJ-NU2YIQGDREY DM2MGTIMGL3BXNPQ6W5BMTBBZ4TJXZWICQ2",
	} {
		id, err := ParseDeviceID(in)
		if err != nil {
			t.Errorf("ParseDeviceID(%q): %v", in, err)
			continue
		}
		if got := id.String(); got != syncthingID {
			t.Errorf("ParseDeviceID(%q).String() = %q, want %q", in, got, syncthingID)
		}
	}
}

func TestParseDeviceIDRefusals(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"",
		"a",
		"P56IOI7MZJNU2IQGDREYDM2MGTMGL3BXNPQ6W5BTBBZ4TJXZWICQ", // 52 chars: Syncthing's legacy form without check characters
		syncthingID + "A",
		strings.Replace(syncthingID, "P56", "P57", 1),
		strings.Replace(syncthingID, "Q2", "Q3", 1),
		strings.Replace(syncthingID, "-", "_", 1),
		strings.Replace(syncthingID, "M", "9", 1),
		strings.Repeat("A", 4000),
	} {
		if _, err := ParseDeviceID(in); !errors.Is(err, ErrBadDeviceID) {
			t.Errorf("ParseDeviceID(%q) = %v, want ErrBadDeviceID", clip(in, 70), err)
		}
	}
}

// Every single-character substitution is caught: Syncthing's Luhn mod 32
// weights (1, 2 folded) are permutations of the alphabet.
func TestCheckCharactersCatchEverySubstitution(t *testing.T) {
	t.Parallel()
	id := testDeviceID(42)
	s := strings.ReplaceAll(id.String(), "-", "")
	caught := 0
	for i := range len(s) {
		for _, c := range []byte(luhnAlphabet) {
			if c == s[i] {
				continue
			}
			typo := s[:i] + string(c) + s[i+1:]
			got, err := ParseDeviceID(typo)
			if err == nil {
				t.Fatalf("substitution at %d (%c→%c) parsed as %s", i, s[i], c, got)
			}
			caught++
		}
	}
	if caught != 56*31 {
		t.Fatalf("checked %d substitutions, want %d", caught, 56*31)
	}
}

func TestDeviceIDRoundTrip(t *testing.T) {
	t.Parallel()
	for range 500 {
		var id DeviceID
		rand.Read(id[:])
		s := id.String()
		if len(s) != DeviceIDLen || strings.Count(s, "-") != 7 {
			t.Fatalf("String() = %q", s)
		}
		for _, form := range []string{s, strings.ToLower(s), strings.ReplaceAll(s, "-", "")} {
			got, err := ParseDeviceID(form)
			if err != nil || got != id {
				t.Fatalf("ParseDeviceID(%q) = %v, %v; want %x", form, got, err, id)
			}
		}
		if id.Short() != s[:7] || ShortID(s) != id.Short() {
			t.Fatalf("Short() = %q, ShortID = %q", id.Short(), ShortID(s))
		}
		back, err := DeviceIDFromFingerprint(id.Fingerprint())
		if err != nil || back != id {
			t.Fatalf("fingerprint round trip: %v", err)
		}
	}
}

func TestDeviceIDText(t *testing.T) {
	t.Parallel()
	type doc struct {
		ID    DeviceID  `json:"id"`
		Zero  DeviceID  `json:"zero"`
		Maybe *DeviceID `json:"maybe,omitempty"`
	}
	in := doc{ID: testDeviceID(1)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"` + in.ID.String() + `","zero":""}`; string(b) != want {
		t.Fatalf("JSON = %s, want %s", b, want)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil || out.ID != in.ID || !out.Zero.IsZero() {
		t.Fatalf("unmarshal: %+v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ3"}`), &out); !errors.Is(err, ErrBadDeviceID) {
		t.Fatalf("bad check char unmarshalled: %v", err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "peer", in.ID)
	if !strings.Contains(buf.String(), "peer="+in.ID.Short()+"\n") {
		t.Fatalf("LogValue: %s", buf.String())
	}
}

func TestParseFingerprint(t *testing.T) {
	t.Parallel()
	fp := testDeviceID(2).Fingerprint()
	colons := strings.ToUpper(fp[:2])
	for i := 2; i < 64; i += 2 {
		colons += ":" + strings.ToUpper(fp[i:i+2])
	}
	for _, in := range []string{fp, strings.ToUpper(fp), colons} {
		if got, err := ParseFingerprint(in); err != nil || got != fp {
			t.Errorf("ParseFingerprint(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", fp[:63], fp + "0", strings.Replace(fp, fp[:1], "g", 1), strings.Repeat(":", 200)} {
		if _, err := ParseFingerprint(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseFingerprint(%q) = %v", in, err)
		}
	}
}

func FuzzParseDeviceID(f *testing.F) {
	f.Add(syncthingID)
	f.Add(strings.ToLower(syncthingID))
	f.Add("P561017MZJNU2YIQGDREYDM2MGTIMGL3BXNPQ6W5BMT88Z4TJXZWICQ2")
	f.Add("")
	f.Add("----")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseDeviceID(s)
		if err != nil {
			if !errors.Is(err, ErrBadDeviceID) {
				t.Fatalf("error %v does not wrap ErrBadDeviceID", err)
			}
			return
		}
		str := id.String()
		back, err := ParseDeviceID(str)
		if err != nil || back != id {
			t.Fatalf("%q parsed to %s which does not parse back: %v", s, str, err)
		}
		// Parsing normalises exactly: same letters once dashes, spaces, case
		// and typos are folded.
		norm := strings.NewReplacer("-", "", " ", "", "0", "O", "1", "I", "8", "B").Replace(strings.ToUpper(s))
		if norm != strings.ReplaceAll(str, "-", "") {
			t.Fatalf("%q accepted as %s", s, str)
		}
	})
}

func TestShortID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"ABC", "ABC"},
		{"ABCDEFG", "ABCDEFG"},
		{"ABCDEFG-HIJKLMN", "ABCDEFG"},
		{"not-a-device-id", "not-a-d"},
	} {
		if got := ShortID(tt.in); got != tt.want {
			t.Errorf("ShortID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
