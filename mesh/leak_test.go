package mesh

import "go.uber.org/goleak"

// leakIgnores lists the goroutines known to outlive their owners, each named
// precisely, with why.
func leakIgnores() []goleak.Option {
	return []goleak.Option{
		// zeroconf's Register starts probe(), which sleeps through its
		// announcements (~3.5 s) and has no way to be stopped (mdns.go).
		goleak.IgnoreAnyFunction("github.com/grandcat/zeroconf.(*Server).probe"),
	}
}
