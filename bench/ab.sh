#!/usr/bin/env bash
# ab.sh OLD_CHECKOUT: an A/B of the 2 KB review path, the webhook built from
# OLD_CHECKOUT (a git worktree of an earlier commit) against this one,
# alternating 5 rounds of 3 s of wrk at 1 and then 8 connections on
# /mutate. Prints req/s per round; compare medians. Needs wrk (make
# bench-tools). Loopback only.
set -euo pipefail
old=$(cd "${1:?usage: ab.sh OLD_CHECKOUT}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
(cd "$old" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/old" .)
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/new" .)
"$work/new" certs -dir "$work/certs" -hosts 127.0.0.1 >/dev/null 2>&1
mkdir -p "$work/bodies"
(cd "$here" && go test -count=1 -run '^TestWriteBenchBodies$' . -args -write-bench-bodies "$work/bodies" >/dev/null)
"$work/old" -listen 127.0.0.1:18443 -tls-cert-file "$work/certs/tls.crt" -tls-private-key-file "$work/certs/tls.key" -log-format json 2>/dev/null &
"$work/new" -listen 127.0.0.1:18444 -tls-cert-file "$work/certs/tls.crt" -tls-private-key-file "$work/certs/tls.key" -log-format json 2>/dev/null &
sleep 1
for c in 1 8; do
  for r in 1 2 3 4 5; do
    for s in old:18443 new:18444; do
      rps=$(cd "$here/bench" && BODY="$work/bodies/deployment-2k.json" wrk -t1 -c$c -d3s --timeout 10s -s wrk.lua "https://127.0.0.1:${s##*:}/mutate?timeout=10s" 2>&1 | awk '/Requests\/sec/ {print $2}')
      echo "c=$c round=$r ${s%%:*} $rps"
    done
  done
done
