package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"meshtray/pairing"
)

// trivialCapability returns a fixed result: the reference device.info is
// measured against, with the same registry path (lookup, schema, policy).
func trivialCapability() *capability {
	return &capability{
		Capability: Capability{
			Name:    "test.trivial",
			Params:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
			Result:  json.RawMessage(`{"type":"object"}`),
			Effects: EffectRead,
		},
		available: func() (bool, string) { return true, "" },
		run: func(context.Context, Call, json.RawMessage) (Result, error) {
			return Result{Data: json.RawMessage(`{"ok":true}`), Summary: "ok"}, nil
		},
	}
}

func benchRegistry(b *testing.B) *Registry {
	r := newTestRegistry(b, Options{})
	r.add(trivialCapability())
	if err := r.SetPolicy("test.trivial", pairing.PolicyAllow); err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkInvoke: device.info next to a capability that does nothing,
// through Registry.Invoke, as the A2A node executor calls it (a grant with
// policy allow).
func BenchmarkInvoke(b *testing.B) {
	r := benchRegistry(b)
	caller := grantCaller(pairing.PolicyAllow)
	for _, name := range []string{"test.trivial", CapDeviceInfo} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Invoke(context.Background(), Call{Capability: name, Caller: caller}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInvokeHTTP: a full POST /nodes/invoke round trip on loopback for
// device.info, next to the same for the do-nothing capability and to a
// handler that only writes a fixed answer (the floor of any HTTP round trip).
func BenchmarkInvokeHTTP(b *testing.B) {
	r := benchRegistry(b)
	p := grantCaller(pairing.PolicyAllow)
	invoke := r.InvokeHandler()
	mux := http.NewServeMux()
	mux.Handle("POST /nodes/invoke", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		invoke.ServeHTTP(w, req.WithContext(pairing.WithPrincipal(req.Context(), p)))
	}))
	mux.HandleFunc("POST /fixed", func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":{"ok":true},"summary":"ok"}` + "\n"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	for _, c := range []struct{ name, path, body string }{
		{"fixed-handler", "/fixed", `{"capability":"test.trivial"}`},
		{"test.trivial", "/nodes/invoke", `{"capability":"test.trivial"}`},
		{CapDeviceInfo, "/nodes/invoke", `{"capability":"device.info"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			body := []byte(c.body)
			for b.Loop() {
				resp, err := client.Post(srv.URL+c.path, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
