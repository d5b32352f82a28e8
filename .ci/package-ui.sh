#!/usr/bin/env bash
# `make package`: adds meshtray-ui (the windows) to the Linux archive that
# `fyne package` made for meshtray, beside meshtray in usr[/local]/bin, and
# to the archive's Makefile (install, uninstall, user-install,
# user-uninstall), which the tool writes for one executable.
#   .ci/package-ui.sh ARCHIVE.tar.xz PATH/TO/meshtray-ui
set -euo pipefail
archive=$1 ui=$2
[ -x "$ui" ] || { echo "package: $ui is missing (make build builds it)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$archive" -C "$work"
top=$(ls "$work")
bindir=$(dirname "$(find "$work/$top/usr" -type f -path '*/bin/*' | head -n1)")
install -m 0755 "$ui" "$bindir/meshtray-ui"
# Every line installing or removing bin/$(Exec) gets its twin for meshtray-ui.
sed -E -i '/^[[:space:]]*(install -Dm00755|-rm) .*bin\/\$\(Exec\)$/{p;s/\$\(Exec\)/meshtray-ui/g}' "$work/$top/Makefile"
grep -q 'bin/meshtray-ui' "$work/$top/Makefile" || { echo "package: the archive's Makefile has no install line for bin/\$(Exec)" >&2; exit 1; }
tar -cJf "$archive" -C "$work" "$top"
