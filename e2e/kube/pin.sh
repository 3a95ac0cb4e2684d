#!/usr/bin/env bash
# pin.sh vX.Y.Z writes the Go module that builds kube-apiserver vX.Y.Z from
# the Go module proxy: e2e/kube/vX.Y/ (go.mod, go.sum, tools.go). One module
# per minor; running it again with a newer patch moves that minor to it.
#
# k8s.io/kubernetes's go.mod points each k8s.io staging module at
# ./staging/..., which its module zip does not hold, so the module here
# replaces every one of them with the published v0.Y.Z of the same release.
# The list is read from that version's go.mod, so it is right for each minor.
#
#   e2e/kube/pin.sh v1.37.2     # then commit e2e/kube/v1.37/
#
# The e2e suite builds the binaries (cd e2e/kube/vX.Y && go build
# k8s.io/kubernetes/cmd/kube-apiserver, and on the newest minor the node's
# four) and caches them by version.
set -euo pipefail

version=${1:?usage: pin.sh vX.Y.Z (go list -m -versions k8s.io/kubernetes lists them)}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "pin.sh: $version is not vX.Y.Z" >&2; exit 2; }
minor=${BASH_REMATCH[1]}
staging=v0.$minor.${BASH_REMATCH[2]}
here=$(cd "$(dirname "$0")" && pwd)
dir=$here/v1.$minor

# The module's go.mod from the proxy, through the module cache.
mod=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -f $mod ]] || { echo "pin.sh: no go.mod for k8s.io/kubernetes@$version" >&2; exit 1; }
modules=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$mod" | sort -u)
[[ -n $modules ]] || { echo "pin.sh: no ./staging replacements in $mod" >&2; exit 1; }

mkdir -p "$dir"
rm -f "$dir/go.mod" "$dir/go.sum"
{
	echo "// Built by the e2e suite; written by e2e/kube/pin.sh $version."
	echo "module github.com/example/webhook/e2e/kube/v1.$minor"
	echo
	echo "go $(go env GOVERSION | sed 's/^go//')"
	echo
	echo "require k8s.io/kubernetes $version"
	echo
	echo "replace ("
	for m in $modules; do
		printf '\t%s => %s %s\n' "$m" "$m" "$staging"
	done
	echo ")"
} >"$dir/go.mod"
cat >"$dir/tools.go" <<EOF
//go:build tools

// Package kube pins kube-apiserver $version for the e2e suite, and the node
// the suite runs the shipped Deployment on: kubelet, kube-controller-manager,
// kube-scheduler and kube-proxy of the same release.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
(cd "$dir" && go mod tidy)
echo "pin.sh: e2e/kube/v1.$minor builds kube-apiserver $version"
