#!/usr/bin/env bash
# `make bench`: every speed and memory figure, each next to its reference in
# the same run. Figures are printed, never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
export LANG=C.UTF-8 LANGUAGE=en
export TS_DISABLE_PORTMAPPER=1 TS_DEBUG_OMIT_LOCAL_ADDRS=1
unset DBUS_SESSION_BUS_ADDRESS DISPLAY WAYLAND_DISPLAY
export MESHTRAY_BENCH=1

section() { printf '\n==== %s ====\n' "$1"; }

section "A2A: meshtray over 0.3 and 1.0 vs a2a-go's a2asrv v0.3.15 and v2.3.1 (send, stream, memory)"
go test -count=1 -run '^TestBenchReport$' -v ./a2a | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$'

section "A2A: tasks in memory vs written through to SQLite, sync=normal (default) and sync=full (send p50 and req/s at c=1 and c=32, size after 10,000 tasks, start-up with 512)"
go test -count=1 -run '^TestBenchPersist$' -v -timeout 20m ./a2a | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$'

section "A2A: one server, message/send over 0.3 vs SendMessage over 1.0, in process"
go test -count=1 -run '^$' -bench 'SendVersions' -benchmem -count 3 ./a2a | grep -E '^(Benchmark|ok)'

section "Delegating out and forwarding: meshtray vs a bare a2a-go client / calling the agent directly"
go test -count=1 -run '^$' -bench 'Outbound|Forward' -benchmem ./a2a/delegate | grep -E '^(Benchmark|ok)'

section "Node capabilities: device.info and a do-nothing capability, in process and over HTTP"
go test -count=1 -run '^$' -bench . -benchmem ./nodes | grep -E '^(Benchmark|ok)'

section "Grant authentication and the auth middleware (per request)"
go test -count=1 -run '^$' -bench 'BenchmarkAuthenticate|BenchmarkRequire' -benchmem ./pairing | grep -E '^(Benchmark|ok)'

section "Storage: SQLite task writes vs an in-memory map, size after 10,000 tasks, start-up with a full store"
go test -count=1 -run '^TestBenchReport$' -v -timeout 20m ./store | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$' -e 'bench_test.go' -e '^        '

section "Keychain backends (file, real Secret Service, go-keyring alone)"
go test -count=1 -run '^$' -bench 'BenchmarkStore' -benchtime=200x ./keychain | grep -E '^(Benchmark|ok)'

section "Discovery: time to discover and to expire (mDNS in netns, tailnet on tsnet)"
go test -count=1 -run '^TestBenchDiscovery' -v -timeout 30m ./mesh | grep -v -e '^=== RUN' -e '^PASS$'

section "Hostile: owner's status latency and the node's RSS/fds under floods from a local attacker"
go test -count=1 -run '^TestBenchHostile$' -v -timeout 20m ./app | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$'

section "Files: sender -> receiver over pinned TLS vs curl -T to a bare Go HTTPS server (1 GiB, MB/s, peak RSS)"
go test -count=1 -run '^TestBenchReport$' -v -timeout 20m ./files | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$'

section "Files between two nodes: meshtray send on loopback vs curl -T to a bare Go HTTPS server (1 GiB, MB/s, peak RSS of both sides)"
go test -count=1 -run '^TestBenchFiles$' -v -timeout 20m ./app | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$' -e 'level='

if [ -x .ci/bench-tray.sh ]; then
  section "Tray: idle CPU, RSS, registration, popup latency vs bare systray"
  .ci/bench-tray.sh
fi
