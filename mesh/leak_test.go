package mesh

import "go.uber.org/goleak"

// leakIgnores lists goroutines known to outlive their owners. None today:
// this process never registers mDNS (the namespace nodes are child
// processes) and tsnet.Server.Close leaves nothing behind. A package that
// runs a Discovery with LAN on in-process must ignore zeroconf's announce
// goroutine, which cannot be stopped (see mdns.go):
//
//	goleak.IgnoreAnyFunction("github.com/grandcat/zeroconf.(*Server).probe")
func leakIgnores() []goleak.Option { return nil }
