#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages meshtray needs, or says how.
#   .ci/deps.sh run    what building and running meshtray needs
#   .ci/deps.sh test   that plus what the tests need (.ci/apt-test.txt)
# As root it runs apt-get and says what it installs; otherwise it prints the
# exact command and fails. On a system without dpkg it only checks the tools.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-run}

# Building: cgo headers for Fyne (OpenGL, X11) and a C compiler.
# Running: a Secret Service for the OS keychain, xclip for the clipboard.
run_pkgs=(gcc pkg-config libgl1-mesa-dev xorg-dev gnome-keyring xclip)
pkgs=("${run_pkgs[@]}")
if [ "$mode" = test ]; then
  while read -r p; do
    p=${p%%#*}; p=${p//[[:space:]]/}
    [ -n "$p" ] && pkgs+=("$p")
  done < "$here/apt-test.txt"
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps: not a Debian/Ubuntu system; make sure you have: ${pkgs[*]}" >&2
  exit 0
fi

# npm ships inside NodeSource's nodejs but is its own package on Debian.
if [ "$mode" = test ]; then pkgs+=(npm); fi

# Packages whose tool may come from elsewhere (NodeSource, a manual install):
# the command on PATH is what counts.
declare -A tool=([nodejs]=node [npm]=npm)

missing=()
for p in $(printf '%s\n' "${pkgs[@]}" | sort -u); do
  if [ -n "${tool[$p]:-}" ] && command -v "${tool[$p]}" >/dev/null 2>&1; then
    continue
  fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "meshtray needs these system packages: ${missing[*]}" >&2
  echo "install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
