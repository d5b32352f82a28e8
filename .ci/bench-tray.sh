#!/usr/bin/env bash
# The tray's benchmark, called by .ci/bench.sh (`make bench`):
# under Xvfb with a test-side StatusNotifierWatcher, the tray process (node
# included) next to a bare fyne.io/systray app with one item: idle CPU over
# 60 s, RSS, start-to-registered, and the popup's open latency (approval
# created -> window mapped). Figures are printed, never asserted.
# MESHTRAY_BENCH_IDLE=10s shortens the idle window.
set -euo pipefail
cd "$(dirname "$0")/.."
export LANG=C.UTF-8 LANGUAGE=en MESHTRAY_BENCH=1
unset DBUS_SESSION_BUS_ADDRESS DISPLAY WAYLAND_DISPLAY
for tool in Xvfb:xvfb xdotool:xdotool dbus-daemon:dbus; do
  command -v "${tool%%:*}" >/dev/null || { echo "bench-tray: ${tool%%:*} is missing: apt-get install -y ${tool#*:}" >&2; exit 1; }
done
go test -count=1 -run '^TestBenchTray$' -v -timeout 15m ./tray | grep -v -e '^=== RUN' -e '^PASS$' -e '^--- PASS'
