package a2a

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"

	"meshtray/jsonout"
	"meshtray/nodes"
)

// Card paths and names.
const (
	// CardPath is where the Agent Card is served (A2A 0.3.0 §5.3; renamed
	// from agent.json in 0.3.0).
	CardPath = "/.well-known/agent-card.json"
	// RPCPath is the JSON-RPC endpoint the card's url points to.
	RPCPath = "/a2a/v1"
	// ManifestPath is the node manifest offered through the card extension.
	ManifestPath = "/nodes/manifest"
	// ManifestExtensionURI names the card extension that points at the node
	// manifest (meshtray's own URN).
	ManifestExtensionURI = "urn:meshtray:ext:node-manifest:v1"
	// SecuritySchemeName is the card's bearer scheme.
	SecuritySchemeName = "bearer"
)

// cardJSON is the union Agent Card as served: A2A 1.0's fields
// (supportedInterfaces, securitySchemes in the named form,
// securityRequirements; a2a-go v2's types) and 0.3's (protocolVersion,
// url, preferredTransport, additionalInterfaces, security; a2a-go v0.3's
// types), so clients of either version resolve it (A2A 1.0 §3.6.2: one
// agent, several interfaces). Fields both versions share are written once.
// Capabilities always spell out streaming and pushNotifications (a2a-go
// omits false booleans).
type cardJSON struct {
	Name                 string                            `json:"name"`
	Description          string                            `json:"description"`
	Version              string                            `json:"version"`
	SupportedInterfaces  []*a2av1.AgentInterface           `json:"supportedInterfaces"`
	Capabilities         cardCapabilities                  `json:"capabilities"`
	SecuritySchemes      map[string]cardScheme             `json:"securitySchemes"`
	SecurityRequirements a2av1.SecurityRequirementsOptions `json:"securityRequirements"`
	DefaultInputModes    []string                          `json:"defaultInputModes"`
	DefaultOutputModes   []string                          `json:"defaultOutputModes"`
	Skills               []a2a.AgentSkill                  `json:"skills"`
	// Signatures are JWS signatures over the card (A2A 1.0 §8.4); none
	// yet.
	Signatures []a2av1.AgentCardSignature `json:"signatures,omitempty"`

	// A2A 0.3 only.
	ProtocolVersion      string                     `json:"protocolVersion"`
	URL                  string                     `json:"url"`
	PreferredTransport   a2a.TransportProtocol      `json:"preferredTransport"`
	AdditionalInterfaces []a2a.AgentInterface       `json:"additionalInterfaces,omitempty"`
	Security             []a2a.SecurityRequirements `json:"security"`
}

type cardCapabilities struct {
	Streaming              bool                 `json:"streaming"`
	PushNotifications      bool                 `json:"pushNotifications"`
	StateTransitionHistory bool                 `json:"stateTransitionHistory"` // 0.3 only
	ExtendedAgentCard      bool                 `json:"extendedAgentCard"`      // 1.0 only
	Extensions             []a2a.AgentExtension `json:"extensions,omitempty"`
}

// cardScheme is one security scheme in both forms: 0.3's flat object
// with its "type" discriminator (type, scheme, bearerFormat, description)
// and 1.0's object wrapping it by kind (httpAuthSecurityScheme: {...}).
// Each version's parser reads its own keys and ignores the other's.
type cardScheme struct {
	Type         string                        `json:"type"`
	Scheme       string                        `json:"scheme"`
	BearerFormat string                        `json:"bearerFormat,omitempty"`
	Description  string                        `json:"description,omitempty"`
	HTTPAuth     *a2av1.HTTPAuthSecurityScheme `json:"httpAuthSecurityScheme"`
}

// CardHandler serves GET /.well-known/agent-card.json: 404 while the card
// is not published (a device with A2A off looks like one that never spoke
// A2A), the card otherwise. The card's url is the request's own base
// (https when the request came over TLS, the Host header's host:port) +
// RPCPath, so every listener hands out a URL that reaches it.
//
// Card fields (A2A 1.0 §5.3 AgentCard and 0.3.0 §5.5; see cardJSON):
// supportedInterfaces, one JSONRPC interface per version ("1.0", "0.3")
// at the same url; the 0.3 fields protocolVersion "0.3.0",
// preferredTransport JSONRPC and url; name = the device name, description
// with the OS environment and what happens to a caller's task,
// version = Options.Version, capabilities {streaming: true,
// pushNotifications: false, extensions: [the node manifest by URI]}, a
// bearer scheme required by securityRequirements (1.0) and security (0.3),
// default modes text/plain and application/json, one skill per available
// capability of the manifest.
func (s *Server) CardHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !s.published.Load() {
			http.NotFound(w, r)
			return
		}
		if !validHost(r.Host) {
			http.Error(w, "bad Host header", http.StatusBadRequest)
			return
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		data, err := s.cardBytes(scheme + "://" + r.Host)
		if err != nil {
			s.log.Error("marshal agent card", "err", err)
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		jsonout.SetHeaders(w.Header()) // no-store: publishing can be switched off at any time
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(data)
		}
	})
}

// signCard is data signed with Options.SignCard, or data as it is when
// there is no signer or it fails.
func (s *Server) signCard(data []byte) []byte {
	if s.opts.SignCard == nil {
		return data
	}
	signed, err := s.opts.SignCard(data)
	if err != nil {
		s.log.Error("sign agent card", "err", err)
		return data
	}
	return signed
}

// validHost accepts a Host header of the forms name, name:port, v4:port,
// [v6]:port: letters, digits and . - : [ ] only, so it is safe inside a URL.
func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for _, c := range []byte(h) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '-', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}

// cardBytes is the card for base as written on the wire: the one place
// the card's JSON is made (a signature over it belongs here).
func (s *Server) cardBytes(base string) ([]byte, error) {
	data, err := jsonout.Marshal(s.card(base))
	if err != nil {
		return nil, err
	}
	return s.signCard(data), nil
}

// card builds the Agent Card for base (scheme://host:port, no trailing
// slash), as CardHandler serves it: the one function that makes its value.
func (s *Server) card(base string) cardJSON {
	name := s.deviceName()
	desc := fmt.Sprintf("meshtray node %q", name)
	if s.opts.OSEnvironment != "" {
		desc += " on " + s.opts.OSEnvironment
	}
	desc += ". Runs this device's capabilities for the devices paired with it. " +
		"A new task follows the approval policy the owner set for the calling grant: " +
		"ask (the task stays submitted until the owner approves or denies it), " +
		"allow (it runs at once) or deny (it ends rejected); " +
		"a capability whose own policy is ask also waits for the owner while the task is working. " +
		fmt.Sprintf("A task waiting for your input ends canceled after %s without an answer, or when more than %d of your tasks wait.",
			s.opts.InterruptedTTL, s.opts.MaxParkedPerOwner)
	version := s.opts.Version
	if version == "" {
		version = "dev"
	}
	url := base + RPCPath
	modes := []string{"text/plain", "application/json"}
	const (
		scheme = "bearer"
		format = "meshtray grant token"
		about  = "A grant token with scope agent or full, issued by this device when it paired with yours."
	)
	card := cardJSON{
		Name:        name,
		Description: desc,
		Version:     version,
		SupportedInterfaces: []*a2av1.AgentInterface{
			{URL: url, ProtocolBinding: a2av1.TransportProtocolJSONRPC, ProtocolVersion: Version10},
			{URL: url, ProtocolBinding: a2av1.TransportProtocolJSONRPC, ProtocolVersion: Version03},
		},
		SecuritySchemes: map[string]cardScheme{
			SecuritySchemeName: {
				Type: "http", Scheme: scheme, BearerFormat: format, Description: about,
				HTTPAuth: &a2av1.HTTPAuthSecurityScheme{Scheme: scheme, BearerFormat: format, Description: about},
			},
		},
		SecurityRequirements: a2av1.SecurityRequirementsOptions{{SecuritySchemeName: a2av1.SecuritySchemeScopes{}}},
		DefaultInputModes:    modes,
		DefaultOutputModes:   modes,
		Skills:               []a2a.AgentSkill{},

		ProtocolVersion:      string(a2a.Version),
		URL:                  url,
		PreferredTransport:   a2a.TransportProtocolJSONRPC,
		AdditionalInterfaces: []a2a.AgentInterface{{URL: url, Transport: a2a.TransportProtocolJSONRPC}},
		Security:             []a2a.SecurityRequirements{{SecuritySchemeName: a2a.SecuritySchemeScopes{}}},
		Capabilities: cardCapabilities{
			Streaming: true,
			Extensions: []a2a.AgentExtension{{
				URI:         ManifestExtensionURI,
				Description: "This device's node capability manifest (capabilities, JSON Schemas of their params and results, effects, approval policy): GET params.url with a grant of scope node.",
				Params: map[string]any{
					"url":   base + ManifestPath,
					"scope": "node",
				},
			}},
		},
	}
	if s.opts.Manifest != nil {
		card.Skills = skillsFrom(s.opts.Manifest.Manifest())
	}
	return card
}

// skillsFrom derives one skill per available capability: id and name are
// the capability name, tags its namespace and effect, examples the
// DataPart form (with placeholder params from its schema) and the text
// form.
func skillsFrom(m nodes.Manifest) []a2a.AgentSkill {
	skills := make([]a2a.AgentSkill, 0, len(m.Capabilities))
	for _, c := range m.Capabilities {
		if !c.Available {
			continue
		}
		ns, _, _ := strings.Cut(c.Name, ".")
		tags := []string{"meshtray", ns}
		if c.Effects != "" {
			tags = append(tags, string(c.Effects))
		}
		example, _ := jsonout.Marshal(map[string]any{"capability": c.Name, "params": exampleParams(c.Params)})
		desc := c.Description
		if desc == "" {
			desc = c.Name
		}
		desc += fmt.Sprintf(" Send a data part %s, or text naming %s; missing parameters are asked for (input-required).", example, c.Name)
		skills = append(skills, a2a.AgentSkill{
			ID:          c.Name,
			Name:        c.Name,
			Description: desc,
			Tags:        tags,
			Examples:    []string{string(example), "please run " + c.Name},
			InputModes:  []string{"application/json", "text/plain"},
			OutputModes: []string{"application/json", "text/plain"},
		})
	}
	slices.SortFunc(skills, func(a, b a2a.AgentSkill) int { return strings.Compare(a.ID, b.ID) })
	return skills
}

// exampleParams builds placeholder params from a JSON Schema's required
// properties (none when nothing is required).
func exampleParams(schema json.RawMessage) map[string]any {
	var sc struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	out := map[string]any{}
	if len(schema) == 0 || json.Unmarshal(schema, &sc) != nil {
		return out
	}
	names := sc.Required
	if len(names) == 0 {
		return out
	}
	for _, n := range names {
		typ, _ := sc.Properties[n].Type.(string)
		switch typ {
		case "string":
			out[n] = "<" + n + ">"
		case "integer", "number":
			out[n] = 1
		case "boolean":
			out[n] = true
		case "array":
			out[n] = []any{}
		case "object":
			out[n] = map[string]any{}
		default:
			out[n] = nil
		}
	}
	return out
}
