package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoControlPathsOutsideTheClient: app.Client is the one door to the
// control API. The route table is read from the server's code (every
// string literal pattern "METHOD /path" app mounts), and no Go file of the
// CLI (this package) or of the tray (tray/ and the packages below it),
// tests included, may hold a string literal that is one of those paths,
// or the start of one ending in "/" (as "/approvals/"+id builds it). A new
// route gets a typed method in app/client_api.go instead.
func TestNoControlPathsOutsideTheClient(t *testing.T) {
	t.Parallel()
	routes := routePaths(t, filepath.Join("..")) // package app
	if len(routes) < 25 {
		t.Fatalf("read %d routes from package app, want the whole route table: %q", len(routes), routes)
	}
	for _, dir := range []string{".", filepath.Join("..", "..", "tray")} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || d.Name() == "routes_test.go" {
				return err
			}
			for _, hit := range controlLiterals(t, path, routes) {
				t.Errorf("%s: control route path %s: call its app.Client method instead", hit.pos, hit.lit)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRouteCheckCatches: the check above finds the ways a path is spelt
// (whole, with a query, as the start of a path with an id), and leaves
// paths that are no control route alone.
func TestRouteCheckCatches(t *testing.T) {
	t.Parallel()
	routes := []string{"/approvals/{id}", "/a2a/agents", "/ui/peers/{id}/manifest", "/status"}
	for lit, want := range map[string]bool{
		"/status":                 true,
		"/a2a/agents?refresh=1":   true,
		"/approvals/":             true,
		"/ui/peers/":              true,
		"/ui/peers/X/manifest":    true,
		"/approvals":              false, // not a route of this table
		"/tmp/logs":               false,
		"/pair#c=":                false,
		"/StatusNotifierItem":     false,
		"/.well-known/agent.json": false,
		"status":                  false,
	} {
		if got := isControlPath(lit, routes); got != want {
			t.Errorf("isControlPath(%q) = %v, want %v", lit, got, want)
		}
	}
}

// routePaths returns the paths of the route patterns package app mounts
// with a string literal: the first argument of its route calls (local,
// owner, mux.Handle) when it is "METHOD /path", except the peers' routes
// (grantRoute).
func routePaths(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			method, path, ok := strings.Cut(s, " ")
			if !ok || method != strings.ToUpper(method) || !strings.HasPrefix(path, "/") {
				return true
			}
			if grantRoute(call.Args[1]) {
				return true
			}
			if !seen[path] {
				seen[path] = true
				out = append(out, path)
			}
			return true
		})
	}
	return out
}

// grantRoute reports a handler behind a grant's scope check
// (auth.Require(scope, h)): a route of the peers' API (a phone's page,
// another node), not the control API, which a test may call as that peer.
func grantRoute(h ast.Expr) bool {
	call, ok := h.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Require"
}

type literalHit struct {
	pos string
	lit string
}

// controlLiterals returns the string literals of the Go file path that
// are control route paths.
func controlLiterals(t *testing.T, path string, routes []string) []literalHit {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hits []literalHit
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && isControlPath(s, routes) {
			hits = append(hits, literalHit{fset.Position(lit.Pos()).String(), lit.Value})
		}
		return true
	})
	return hits
}

// isControlPath reports whether s, without its query or fragment, is one
// of routes (a {name} segment matches any segment), or ends in "/" and
// starts one.
func isControlPath(s string, routes []string) bool {
	if !strings.HasPrefix(s, "/") {
		return false
	}
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	prefix := strings.HasSuffix(s, "/")
	segs := strings.Split(strings.Trim(s, "/"), "/")
	if segs[0] == "" {
		return false
	}
	for _, r := range routes {
		rsegs := strings.Split(strings.Trim(r, "/"), "/")
		if len(segs) > len(rsegs) || (!prefix && len(segs) != len(rsegs)) || (prefix && len(segs) == len(rsegs)) {
			continue
		}
		match := true
		for i, sg := range segs {
			if rsegs[i] != sg && !strings.HasPrefix(rsegs[i], "{") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
