#!/usr/bin/env bash
# ab.sh OLD_CHECKOUT [BODY]: an A/B of one review's served path, the webhook
# built from OLD_CHECKOUT (a git worktree of an earlier commit) against this
# one, alternating 5 rounds of 3 s of wrk at 1 and then 8 connections on
# /mutate. BODY is one of the benchmark bodies: deployment-2k (the
# default), pod-100k, update-1m. Prints, per round, req/s and the server's
# CPU per review (user and system, from /proc); compare medians. Needs wrk
# (make bench-tools). Loopback only.
set -euo pipefail
old=$(cd "${1:?usage: ab.sh OLD_CHECKOUT [BODY]}" && pwd)
body=${2:-deployment-2k}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
(cd "$old" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/old" .)
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/new" .)
"$work/new" certs -dir "$work/certs" -hosts 127.0.0.1 >/dev/null 2>&1
mkdir -p "$work/bodies"
(cd "$here" && go test -count=1 -run '^TestWriteBenchBodies$' . -args -write-bench-bodies "$work/bodies" >/dev/null)
test -s "$work/bodies/$body.json" || { echo "no benchmark body $body: want deployment-2k, pod-100k or update-1m" >&2; exit 2; }
"$work/old" -listen 127.0.0.1:18443 -tls-cert-file "$work/certs/tls.crt" -tls-private-key-file "$work/certs/tls.key" -log-format json 2>/dev/null &
oldpid=$!
"$work/new" -listen 127.0.0.1:18444 -tls-cert-file "$work/certs/tls.crt" -tls-private-key-file "$work/certs/tls.key" -log-format json 2>/dev/null &
newpid=$!
sleep 1
# cpu PID: the process's user and system time so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
for c in 1 8; do
  for r in 1 2 3 4 5; do
    for s in old:18443:$oldpid new:18444:$newpid; do
      name=${s%%:*} rest=${s#*:} port=${rest%%:*} pid=${rest#*:}
      before=$(cpu "$pid")
      out=$(cd "$here/bench" && BODY="$work/bodies/$body.json" wrk -t1 -c$c -d3s --timeout 10s -s wrk.lua "https://127.0.0.1:$port/mutate?timeout=10s" 2>&1)
      after=$(cpu "$pid")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      n=$(awk '/requests in/ {print $1}' <<<"$out")
      echo "$body c=$c round=$r $name $rps req/s $(awk -v t=$((after - before)) -v n="$n" -v hz="$ticks" 'BEGIN {printf "%.3f", n ? 1000 * t / hz / n : 0}') ms CPU/review"
    done
  done
done
