#!/usr/bin/env bash
# `make run`: start meshtray. When no OS keychain is reachable (a server, a
# container, an SSH session without a desktop), meshtray refuses to start and
# says so; for a developer run we then retry with the file keychain, loudly.
set -uo pipefail
bin=$1; shift
"$bin" "$@"
rc=$?
if [ $rc -eq 3 ]; then
  echo >&2
  echo "make run: no OS keychain here; running with --keychain file (secrets in a 0600 file in the state dir)." >&2
  exec "$bin" --keychain file "$@"
fi
exit $rc
