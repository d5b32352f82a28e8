#!/usr/bin/env bash
# Runs every test: the race-enabled suite, then each fuzz target for a
# bounded time. Tests start what they need themselves (private dbus sessions,
# gnome-keyring, Xvfb, network namespaces, tsnet + testcontrol on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."

export LANG=C.UTF-8 LANGUAGE=en
# Read by tailscale.com at package init: keep tsnet test nodes off the
# machine's gateway and its own external addresses.
export TS_DISABLE_PORTMAPPER=1 TS_DEBUG_OMIT_LOCAL_ADDRS=1
# No test may reach a real desktop session or tailscaled of the developer.
unset DBUS_SESSION_BUS_ADDRESS DISPLAY WAYLAND_DISPLAY

pkgs=${PKGS:-./...}
echo "== go vet" >&2
go vet $pkgs
echo "== go test -race" >&2
go test -race -count=1 -shuffle=on -timeout 40m $pkgs

fuzztime=${FUZZTIME:-15s}
for pkg in $(go list $pkgs); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for fz in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== fuzz $pkg $fz ($fuzztime)" >&2
    go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
