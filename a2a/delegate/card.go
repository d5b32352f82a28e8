package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	agent "meshtray/a2a"
	"meshtray/a2a/cardsig"
	"meshtray/pairing"
)

// Reading an agent's card: which A2A version and interface meshtray calls
// it with, what it requires of us, and whether it is signed. Cards are
// read from their JSON as fetched (not through a2a-go's 0.3 type, which
// knows neither 1.0's supportedInterfaces nor its security schemes), so
// 0.2.x, 0.3, 1.0 and union cards all parse.

// The A2A versions the client speaks (the JSON-RPC binding of each).
const (
	Version03 = "0.3" // A2A 0.3.0 (0.2.x cards are spoken to as 0.3: same methods)
	Version10 = "1.0" // A2A 1.0 (§9 JSON-RPC binding)
)

// CardInfo is what meshtray keeps of a verified Agent Card.
type CardInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version,omitempty"`
	// ProtocolVersion is the A2A version meshtray calls the agent with:
	// Version10 or Version03 (older records say "0.3.0": 0.3).
	ProtocolVersion string      `json:"protocol_version"`
	Endpoint        string      `json:"endpoint"`         // the JSON-RPC URL calls go to
	Tenant          string      `json:"tenant,omitempty"` // 1.0 interface tenant, sent with every call
	Streaming       bool        `json:"streaming"`
	Skills          []SkillInfo `json:"skills"`
	// Signature is cardsig's verdict: "signed" or "unsigned" (an invalid
	// card is refused); SignedBy is the kid of the signature that verified.
	Signature string `json:"signature,omitempty"`
	SignedBy  string `json:"signed_by,omitempty"`
	// Notes say what meshtray assumed reading the card (a missing
	// protocolVersion read as 0.3.0, a 0.2.x card spoken to as 0.3, a
	// signature it could not check).
	Notes []string `json:"notes,omitempty"`
}

// V1 reports whether calls use A2A 1.0.
func (c CardInfo) V1() bool { return strings.HasPrefix(c.ProtocolVersion, "1.") }

// SkillInfo is one skill of a card.
type SkillInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Bounds on what is kept of a card.
const (
	maxCardSkills    = 64
	maxCardTextLen   = 500
	maxCardNameLen   = 100
	maxSkillFieldLen = 100
	maxInterfaces    = 32
)

// errPeerSignature is a paired device's card whose signature is not made
// with the certificate this device pinned for it.
var errPeerSignature = errors.New("the card's signature is not the paired device's")

// wireCard is what VerifyCard reads of a card: the 0.3 fields
// (a2a.json AgentCard), 1.0's supportedInterfaces and security, and the
// 0.1 field that tells a pre-0.2 card.
type wireCard struct {
	ProtocolVersion      *string `json:"protocolVersion"`
	Name                 string  `json:"name"`
	Description          string  `json:"description"`
	Version              string  `json:"version"`
	URL                  string  `json:"url"`
	PreferredTransport   string  `json:"preferredTransport"`
	AdditionalInterfaces []struct {
		URL       string `json:"url"`
		Transport string `json:"transport"`
	} `json:"additionalInterfaces"`
	SupportedInterfaces []struct {
		URL             string `json:"url"`
		ProtocolBinding string `json:"protocolBinding"`
		ProtocolVersion string `json:"protocolVersion"`
		Tenant          string `json:"tenant"`
	} `json:"supportedInterfaces"`
	Capabilities struct {
		Streaming bool `json:"streaming"`
	} `json:"capabilities"`
	Skills []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"skills"`
	SecuritySchemes      map[string]json.RawMessage `json:"securitySchemes"`
	Security             []map[string][]string      `json:"security"`
	SecurityRequirements []struct {
		Schemes map[string]json.RawMessage `json:"schemes"`
	} `json:"securityRequirements"`
	Authentication json.RawMessage `json:"authentication"` // A2A 0.1
}

// VerifyCard checks an external agent's card (raw, as fetched from base)
// before meshtray uses it, and returns what is kept of it. Errors wrap
// ErrCardInvalid and name the version or field that is wrong:
//
//   - the interface: a supportedInterfaces entry with protocolBinding
//     JSONRPC and protocolVersion 1.x is used over A2A 1.0; else one with
//     0.3 (or 0.2); else the 0.3 fields: url with preferredTransport
//     JSONRPC (or none: the default), or an additionalInterfaces JSONRPC
//     entry. A card with no JSON-RPC interface is refused, saying what it
//     offers (HTTP+JSON, GRPC);
//   - protocolVersion of a 0.3 card: missing reads as 0.3.0 (its schema's
//     default; a note says so), 0.2.x is spoken to as 0.3 (same methods),
//     0.1 and anything before 0.2 (tasks/send) are refused, as is a card
//     with 0.1's authentication field and no protocolVersion;
//   - the endpoint is an http(s) URL (parseAgentURL) on base's origin
//     (scheme, host, port), so a card never sends our token elsewhere;
//   - security (0.3 security, 1.0 securityRequirements): one alternative
//     must be bearer-only (HTTP bearer); OAuth 2.0, OpenID Connect, API
//     keys and mutual TLS are refused: meshtray sends bearer tokens only;
//   - a name and at least one skill, each with an id and a name;
//   - signatures (A2A 1.0 §8.4, cardsig.Verify): invalid is refused.
func VerifyCard(raw []byte, base *url.URL) (CardInfo, error) {
	return verifyCard(raw, base, nil)
}

// verifyCardOfPeer is VerifyCard for a paired device's card: a signature
// must be made with its pinned certificate; a bad one is refused as
// pairing.ErrPinMismatch.
func verifyCardOfPeer(raw []byte, base *url.URL, dev pairing.DeviceID) (CardInfo, error) {
	return verifyCard(raw, base, &dev)
}

func verifyCard(raw []byte, base *url.URL, dev *pairing.DeviceID) (CardInfo, error) {
	bad := func(format string, args ...any) (CardInfo, error) {
		return CardInfo{}, fmt.Errorf("%w: %s", ErrCardInvalid, fmt.Sprintf(format, args...))
	}
	var card wireCard
	if err := json.Unmarshal(raw, &card); err != nil {
		return bad("the card does not parse: %v", err)
	}
	var info CardInfo
	name := strings.TrimSpace(card.Name)
	if name == "" {
		return bad("name is empty")
	}
	if len(card.SupportedInterfaces) > maxInterfaces {
		return bad("%d supportedInterfaces (at most %d)", len(card.SupportedInterfaces), maxInterfaces)
	}

	// The interface, by version.
	var endpoint string
	for _, want := range []string{Version10, Version03, "0.2"} {
		for _, in := range card.SupportedInterfaces {
			mm := majorMinor(in.ProtocolVersion)
			if want == Version10 && strings.HasPrefix(mm, "1.") {
				mm = Version10 // a later 1.x minor takes 1.0 calls (A2A 1.0 §3.6)
			}
			if in.ProtocolBinding == "JSONRPC" && in.URL != "" && mm == want {
				endpoint, info.Tenant = in.URL, in.Tenant
				info.ProtocolVersion = want
				break
			}
		}
		if endpoint != "" {
			break
		}
	}
	if info.ProtocolVersion == "0.2" {
		info.ProtocolVersion = Version03
		info.Notes = append(info.Notes, "a 0.2 interface, spoken to as 0.3 (the same JSON-RPC methods)")
	}
	if endpoint == "" {
		pv := ""
		if card.ProtocolVersion != nil {
			pv = strings.TrimSpace(*card.ProtocolVersion)
		}
		switch mm := majorMinor(pv); {
		case pv == "" && len(card.Authentication) > 0 && card.SecuritySchemes == nil:
			return bad("the card has A2A 0.1's authentication field and no protocolVersion: an agent from before 0.2 (tasks/send); meshtray speaks A2A 0.3 and 1.0")
		case pv == "":
			info.Notes = append(info.Notes, "the card has no protocolVersion: read as 0.3.0, its schema's default")
		case mm == Version03:
		case mm == "0.2":
			info.Notes = append(info.Notes, fmt.Sprintf("protocolVersion %s: spoken to as 0.3 (the same JSON-RPC methods)", agent.Truncate(pv, 20)))
		case mm == "0.1" || mm == "0.0":
			return bad("protocolVersion %s predates A2A 0.2 (tasks/send); meshtray speaks A2A 0.3 and 1.0", agent.Truncate(pv, 20))
		case strings.HasPrefix(mm, "1."):
			if len(card.SupportedInterfaces) == 0 {
				return bad("protocolVersion %s but no supportedInterfaces (where 1.0 lists its endpoints)", agent.Truncate(pv, 20))
			}
		default:
			return bad("protocolVersion %q: meshtray speaks A2A 0.3 and 1.0", agent.Truncate(pv, 20))
		}
		info.ProtocolVersion = Version03
		switch card.PreferredTransport {
		case "", "JSONRPC":
			endpoint = card.URL
		}
		if endpoint == "" {
			for _, in := range card.AdditionalInterfaces {
				if in.Transport == "JSONRPC" && in.URL != "" {
					endpoint = in.URL
					break
				}
			}
		}
		if endpoint == "" {
			for _, in := range card.SupportedInterfaces {
				if in.ProtocolBinding == "JSONRPC" {
					return bad("supportedInterfaces offers JSONRPC with protocolVersion %q; meshtray speaks A2A 0.3 and 1.0", agent.Truncate(in.ProtocolVersion, 20))
				}
			}
			if card.URL == "" && len(card.SupportedInterfaces) == 0 && len(card.AdditionalInterfaces) == 0 {
				return bad("url is missing")
			}
			return bad("no JSON-RPC interface: the card offers %s; meshtray speaks the JSON-RPC binding only", offered(card))
		}
	}
	eu, err := parseAgentURL(endpoint)
	if err != nil {
		return bad("url %q: %v", agent.Truncate(endpoint, 100), err)
	}
	if origin(eu) != origin(base) {
		return bad("url %s is on another origin than %s, where the card came from; meshtray sends a token only where it fetched the card",
			agent.Truncate(endpoint, 100), origin(base))
	}
	if err := bearerSatisfies(card); err != nil {
		return bad("%v", err)
	}
	if len(card.Skills) == 0 {
		return bad("no skills: the card declares nothing the agent can do")
	}
	info.Name = agent.Truncate(oneLineText(name), maxCardNameLen)
	info.Description = agent.Truncate(oneLineText(card.Description), maxCardTextLen)
	info.Version = agent.Truncate(oneLineText(card.Version), 40)
	info.Endpoint = eu.String()
	info.Tenant = agent.Truncate(info.Tenant, 100)
	info.Streaming = card.Capabilities.Streaming
	for i, s := range card.Skills {
		if strings.TrimSpace(s.ID) == "" || strings.TrimSpace(s.Name) == "" {
			return bad("skill %d has no id or no name", i)
		}
		if len(info.Skills) < maxCardSkills {
			info.Skills = append(info.Skills, SkillInfo{
				ID:   agent.Truncate(oneLineText(s.ID), maxSkillFieldLen),
				Name: agent.Truncate(oneLineText(s.Name), maxSkillFieldLen),
			})
		}
	}

	var pin cardsig.Pin
	if dev != nil {
		pin = cardsig.PinDevice(*dev)
	}
	sig := cardsig.Verify(raw, pin)
	switch sig.Status {
	case cardsig.Invalid:
		detail := agent.Truncate(oneLineText(sig.Detail), 200)
		if dev != nil {
			return CardInfo{}, fmt.Errorf("%w: %w: %s", pairing.ErrPinMismatch, errPeerSignature, detail)
		}
		return bad("invalid signature: %s", detail)
	case cardsig.Signed:
		info.SignedBy = agent.Truncate(oneLineText(sig.KeyID), 100)
	case cardsig.Unsigned:
		if sig.Detail != "" {
			info.Notes = append(info.Notes, "signature not checked: "+agent.Truncate(oneLineText(sig.Detail), 200))
		}
	}
	info.Signature = string(sig.Status)
	return info, nil
}

// majorMinor is "1.0" of "1.0.1", "0.3" of "0.3.0" and of "0.3"; "" for "".
func majorMinor(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// offered lists the bindings a card offers, for the refusal of a card
// without JSON-RPC.
func offered(c wireCard) string {
	var out []string
	add := func(b string) {
		b = agent.Truncate(oneLineText(b), 20)
		if b != "" && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	for _, in := range c.SupportedInterfaces {
		add(in.ProtocolBinding)
	}
	add(c.PreferredTransport)
	for _, in := range c.AdditionalInterfaces {
		add(in.Transport)
	}
	if len(out) == 0 {
		return "no interface"
	}
	return strings.Join(out, ", ")
}

// schemeKind is what one security scheme asks for: "bearer" (what meshtray
// sends), or a description of what it cannot satisfy.
func schemeKind(raw json.RawMessage) string {
	var s struct {
		// 0.3 (OpenAPI style)
		Type   string `json:"type"`
		Scheme string `json:"scheme"`
		// 1.0 (one member per kind)
		HTTP *struct {
			Scheme string `json:"scheme"`
		} `json:"httpAuthSecurityScheme"`
		APIKey *json.RawMessage `json:"apiKeySecurityScheme"`
		OAuth2 *json.RawMessage `json:"oauth2SecurityScheme"`
		OIDC   *json.RawMessage `json:"openIdConnectSecurityScheme"`
		MTLS   *json.RawMessage `json:"mtlsSecurityScheme"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return "a security scheme that does not parse"
	}
	switch {
	case s.HTTP != nil && strings.EqualFold(s.HTTP.Scheme, "bearer"),
		strings.EqualFold(s.Type, "http") && strings.EqualFold(s.Scheme, "bearer"):
		return "bearer"
	case s.OAuth2 != nil, strings.EqualFold(s.Type, "oauth2"):
		return "OAuth 2.0"
	case s.OIDC != nil, strings.EqualFold(s.Type, "openIdConnect"):
		return "OpenID Connect"
	case s.APIKey != nil, strings.EqualFold(s.Type, "apiKey"):
		return "an API key"
	case s.MTLS != nil, strings.EqualFold(s.Type, "mutualTLS"):
		return "mutual TLS"
	case s.HTTP != nil:
		return "HTTP " + agent.Truncate(oneLineText(s.HTTP.Scheme), 20) + " authentication"
	case strings.EqualFold(s.Type, "http"):
		return "HTTP " + agent.Truncate(oneLineText(s.Scheme), 20) + " authentication"
	}
	return "an unknown security scheme"
}

// bearerSatisfies checks that meshtray can meet the card's security: no
// requirement, or one alternative (0.3 security, 1.0 securityRequirements:
// a list of alternatives, each a set of schemes all required) made only of
// bearer schemes.
func bearerSatisfies(c wireCard) error {
	var alts [][]string
	for _, req := range c.Security {
		alts = append(alts, slices.Sorted(maps.Keys(req)))
	}
	for _, req := range c.SecurityRequirements {
		alts = append(alts, slices.Sorted(maps.Keys(req.Schemes)))
	}
	if len(alts) == 0 {
		return nil
	}
	var need []string
	for _, alt := range alts {
		ok := true
		for _, name := range alt {
			raw, defined := c.SecuritySchemes[name]
			kind := "an undeclared security scheme"
			if defined {
				kind = schemeKind(raw)
			}
			if kind != "bearer" {
				ok = false
				if n := fmt.Sprintf("%s (%q)", kind, agent.Truncate(oneLineText(name), 40)); !slices.Contains(need, n) {
					need = append(need, n)
				}
			}
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("the card requires %s; meshtray sends bearer tokens only", strings.Join(need, " or "))
}

// oneLineText collapses whitespace (newlines included) to single spaces.
func oneLineText(s string) string {
	return strings.Join(strings.Fields(strings.ToValidUTF8(s, "?")), " ")
}

// cardURL is where the card of an agent added as raw lives: raw itself when
// its path ends in ".json" (an explicit card URL), else raw's path +
// agent.CardPath (A2A 0.3.0 §5.3, the well-known URI).
func cardURL(u *url.URL) *url.URL {
	c := *u
	if strings.HasSuffix(strings.ToLower(c.Path), ".json") {
		return &c
	}
	c.Path = strings.TrimSuffix(c.Path, "/") + agent.CardPath
	c.RawPath = ""
	return &c
}

// fetchCard GETs the card at cu with hc, bounded to MaxCardBytes, and
// returns its JSON. A 404 is ErrCardUnpublished; an oversize card is
// ErrCardInvalid; transport failures are returned as they are (classify
// them).
func fetchCard(ctx context.Context, hc *http.Client, cu *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cu.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: no agent card at %s (HTTP 404)", ErrCardUnpublished, cu.Redacted())
	case resp.StatusCode != http.StatusOK:
		snip, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, &statusError{Code: resp.StatusCode, Status: resp.Status, Snippet: redact(cleanSnippet(snip), "")}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxCardBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > MaxCardBytes {
		return nil, fmt.Errorf("%w: the card at %s is over %d bytes", ErrCardInvalid, cu.Redacted(), MaxCardBytes)
	}
	return body, nil
}
