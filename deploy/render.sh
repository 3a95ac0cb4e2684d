#!/usr/bin/env bash
# Renders the manifests in deploy/ with certificates from `webhook certs`.
#
#   deploy/render.sh in-cluster OUT        # Service mode: Namespace, Deployment, Service,
#                                          # PDB, TLS Secret and both webhook configurations
#   deploy/render.sh url HOST:PORT OUT     # URL mode: both configurations for https://HOST:PORT,
#                                          # and in OUT/apiserver the authorization webhook's
#                                          # AuthorizationConfiguration and kubeconfig (unless
#                                          # authorize/ is deleted)
#   deploy/render.sh static HOST:PORT OUT  # URL mode from the control plane: an
#                                          # AdmissionConfiguration and both
#                                          # configurations as static manifests
#                                          # (kube-apiserver 1.37, or 1.36 with the
#                                          # feature gate: docs/versions.md)
#
# then `kubectl apply -f OUT`, or for static, kube-apiserver
# --admission-control-config-file=OUT/admission-config.yaml. The files are
# numbered in the order kubectl applies a directory's: the Namespace first,
# the webhook configurations last. A policy that reads the cluster
# (`webhook reads` lists what) also gets OUT/NN-rbac.yaml, the RBAC that
# lets its ServiceAccount get, list and watch exactly that; in service mode
# the Deployment then mounts that account's token, and outside the cluster
# the webhook needs a kubeconfig of it (-kubeconfig, docs/deploy.md).
# Certificates go to OUT/certs (override with CERTS=dir). Run it again to
# renew the serving certificate: the CA in the certificate directory is
# kept, so caBundle does not change; kubectl apply -f OUT/03-secret.yaml.
# A second run into OUT keeps the IMAGE, NAMESPACE, NAME and CERTS of the
# first (in OUT/.render-settings) unless given again. The Secret, which holds the
# serving key, is written readable by its owner alone.
#
# Environment: NAMESPACE and NAME, where the webhook runs and what its
# Deployment, Service, ServiceAccount, Secret (NAME-tls) and the rest are
# called (default webhook-system and webhook; every file, the certificate
# and the webhook configurations' service references follow them);
# WEBHOOK, the command that runs the webhook binary (default: `go run` of
# this repository); IMAGE, the Deployment's image (default webhook:latest,
# what `make image` builds). For OUT/apiserver: APISERVER_DIR, where its
# files will be on the control-plane host (default: OUT/apiserver itself);
# CLIENT_CERT and CLIENT_KEY, the client certificate the apiserver presents
# to /authorize, signed by a CA of the webhook's own (default:
# /etc/kubernetes/pki/webhook-client.crt and .key, as docs/operations.md's Security).
set -euo pipefail

usage() { sed -n '2,/^set -euo pipefail$/p' "$0" | sed '$d' >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case $mode in
  in-cluster) [ $# -eq 2 ] || usage; out=$2 ;;
  url|static)
    [ $# -eq 3 ] || usage; hostport=$2; out=$3
    case $hostport in
      *:[0-9]*) ;;
      *) echo "render.sh: $hostport: want HOST:PORT, such as webhook.example.com:8443 or [::1]:8443" >&2; exit 2 ;;
    esac
    # -listen: a loopback host itself, which no other network reaches;
    # else every address, the port alone.
    case ${hostport%:*} in
      127.*|'[::1]'|localhost) listen=$hostport ;;
      *) listen=:${hostport##*:} ;;
    esac
    ;;
  *) usage ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
# A renewal renders OUT again: the same Deployment, for the same Service,
# with the same CA.
settings=$out/.render-settings
if [ -f "$settings" ]; then
  while IFS='=' read -r key value; do
    case $key in
      IMAGE|NAMESPACE|NAME|CERTS)
        [ -z "${!key:-}" ] && [ -n "$value" ] || continue
        printf -v "$key" '%s' "$value"
        echo "render.sh: $key=$value, as $out was rendered with" >&2 ;;
    esac
  done < "$settings"
fi
image=${IMAGE:-webhook:latest}
[ -n "${IMAGE:-}" ] || echo "IMAGE is not set: the Deployment runs webhook:latest, which each node must already hold (make image), or set IMAGE to your registry's" >&2
namespace=${NAMESPACE:-webhook-system}
name=${NAME:-webhook}
# As the apiserver checks a Namespace's and a Service's name: a DNS label.
for v in "NAMESPACE=$namespace" "NAME=$name"; do
  [[ ${v#*=} =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
    { echo "render.sh: $v: want a DNS label (lowercase letters, digits and '-', at most 63)" >&2; exit 2; }
done
# The namespace is the webhook's alone: 00-namespace.yaml enforces Pod
# Security restricted on it, and kubectl delete -f OUT deletes it.
case $namespace in
  default|kube-system|kube-public|kube-node-lease)
    echo "render.sh: NAMESPACE=$namespace: want a namespace of the webhook's own; 00-namespace.yaml would enforce Pod Security restricted on $namespace, refusing its other Pods, and kubectl delete -f OUT would delete it" >&2
    exit 2 ;;
esac
certs=${CERTS:-$out/certs}
mkdir -p "$certs"
certs=$(cd "$certs" && pwd)
printf 'IMAGE=%s\nNAMESPACE=%s\nNAME=%s\nCERTS=%s\n' "${IMAGE:-}" "$namespace" "$name" "${CERTS:+$certs}" > "$settings"
if [ -n "${WEBHOOK:-}" ]; then
  webhook=($WEBHOOK)
else
  webhook=(go -C "$root" run .)
fi

# The order kubectl applies a directory's files in is their names': each
# rendered file is numbered by its place here, so that the Namespace comes
# first and the webhook configurations last (kubernetes/kubectl#1356).
order=(namespace serviceaccount rbac secret service networkpolicy deployment poddisruptionbudget webhooks)
# numbered NAME.yaml: NAME.yaml as OUT names it, such as 00-namespace.yaml.
numbered() {
  local i
  for i in "${!order[@]}"; do
    [ "${order[$i]}.yaml" = "$1" ] && { printf '%02d-%s' "$i" "$1"; return; }
  done
  echo "render.sh: $1 is not in render.sh's order" >&2; exit 1
}

# What an earlier render into OUT wrote goes first, numbered or under the
# names render.sh gave before it numbered them (deployment.yaml, ...):
# kubectl applies every file in OUT, and a stale file would be applied too,
# deployment.yaml after 06-deployment.yaml, undoing it, or 02-rbac.yaml
# of a policy that now reads nothing.
if [ "$mode" != static ]; then
  for f in "${order[@]}"; do rm -f "$out/$f.yaml" "$out"/[0-9][0-9]-"$f.yaml"; done
fi

# render FILE [DEST]: copy FILE to DEST (default: into OUT, numbered) with
# the placeholders, the namespace and the names filled in.
render() {
  sed -E -e "s|__CA_BUNDLE__|$ca_bundle|g" -e "s|__IMAGE__|$image|g" \
    -e "s/\bwebhook-system\b/$namespace/g" \
    -e "s/^( *-? *(name|serviceAccountName|app\.kubernetes\.io\/name)): webhook$/\1: $name/" \
    -e "s/^( *(secretName|name)): webhook-tls$/\1: $name-tls/" \
    -e "s/service: \{name: webhook, /service: {name: $name, /" \
    "$1" > "${2:-$out/$(numbered "$(basename "$1")")}"
}

# reads: what the policy reads of the cluster, as RBAC for its
# ServiceAccount (`webhook reads -o rbac`); empty when it reads nothing,
# or when the webhook has no cluster part (cluster/ deleted).
reads=
if "${webhook[@]}" help reads >/dev/null 2>&1; then
  # (That the policy reads nothing is no news here: no RBAC is rendered.)
  reads=$("${webhook[@]}" reads -o rbac -service-account "$namespace/$name" 2> >(grep -v 'the policy reads nothing of the cluster' >&2))
fi

# certs: webhook certs into $certs with ARGS, its caBundle on stdout, which
# render.sh takes; what it says of the certificates is passed on, without
# its "caBundle on stdout", which is render.sh's to use.
certs() {
  "${webhook[@]}" certs -dir "$certs" "$@" 2> >(sed 's/; caBundle on stdout$//' >&2)
}

# render_reads: when the policy reads the cluster, OUT/NN-rbac.yaml, and the
# Namespace and ServiceAccount it is bound to when they are not rendered
# already; nothing otherwise, and no credentials are asked for.
render_reads() {
  [ -n "$reads" ] || return 0
  printf '%s\n' "$reads" > "$out/$(numbered rbac.yaml)"
  for f in namespace.yaml serviceaccount.yaml; do
    [ -e "$out/$(numbered $f)" ] || render "$root/deploy/in-cluster/$f"
  done
}

# url_webhooks DEST: deploy/webhooks.yaml rendered for a webhook at
# https://HOST:PORT, for both URL modes. The rules, selectors and policies
# stay exactly as written there; only clientConfig changes.
url_webhooks() {
  host=${hostport%:*}
  host=${host#[}; host=${host%]}   # [::1]:8443 -> ::1
  ca_bundle=$(certs -hosts "$host")
  render "$root/deploy/webhooks.yaml" "$1"
  # Each `service: {…, path: P, port: 443}` becomes `url: https://HOST:PORT/P`.
  sed -i -E "s#service: \{name: $name, namespace: $namespace, path: ([^,]+), port: 443\}#url: https://$hostport\1#" "$1"
  sed -i -e '/# Service mode:/,/# checks its certificate/d' "$1"
  if grep -qE '^ *service:' "$1"; then
    echo "render.sh: a clientConfig in deploy/webhooks.yaml is not of the form service: {name: webhook, namespace: webhook-system, path: /P, port: 443}" >&2
    exit 1
  fi
}

case $mode in
  in-cluster)
    # The name the apiserver checks is <service>.<namespace>.svc.
    ca_bundle=$(certs -service "$name" -namespace "$namespace")
    for f in "$root"/deploy/in-cluster/*.yaml "$root"/deploy/webhooks.yaml; do render "$f"; done
    if [ -n "$reads" ]; then
      # The Deployment mounts the ServiceAccount's token only for a policy
      # that reads the cluster, which may then reach the apiserver's port.
      sed -i 's/automountServiceAccountToken: false/automountServiceAccountToken: true/' "$out/$(numbered deployment.yaml)" "$out/$(numbered serviceaccount.yaml)"
      [ ! -e "$out/$(numbered networkpolicy.yaml)" ] ||
        sed -i 's/^  egress: \[\]$/  egress:\n  # The apiserver, for what the policy reads: its port behind the\n  # kubernetes Service (443), and the port it listens on (often 6443).\n  - ports:\n    - {port: 443, protocol: TCP}\n    - {port: 6443, protocol: TCP}/' "$out/$(numbered networkpolicy.yaml)"
      render_reads
    fi
    secret=$out/$(numbered secret.yaml)
    rm -f "$secret"   # so that umask, not an older file's mode, decides it
    (umask 077; cat > "$secret") <<YAML
# The serving certificate and key from \`webhook certs\`; the CA's key stays
# in $certs and never enters the cluster.
apiVersion: v1
kind: Secret
metadata:
  name: $name-tls
  namespace: $namespace
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 < "$certs/tls.crt")
  tls.key: $(base64 -w0 < "$certs/tls.key")
YAML
    ;;
  url)
    url_webhooks "$out/$(numbered webhooks.yaml)"
    render_reads
    echo "run the webhook where https://$hostport reaches it:" >&2
    echo "  webhook -listen $listen -tls-cert-file $certs/tls.crt -tls-private-key-file $certs/tls.key${reads:+ -kubeconfig KUBECONFIG}" >&2
    [ -z "$reads" ] || echo "  with KUBECONFIG a kubeconfig of the ServiceAccount $namespace/$name, which $out/$(numbered rbac.yaml) lets read what the policy reads (docs/deploy.md)" >&2
    # The authorization webhook is configured on the apiserver's command
    # line, not through the API: its files go apart from what kubectl
    # applies. A policy with no use for /authorize deletes them
    # (docs/testing.md), and nothing is rendered for it.
    authorization=("$root"/authorize/deploy/authorization-*.yaml)
    if [ -e "${authorization[0]}" ]; then
      apiserver_out="$out/apiserver"
      mkdir -p "$apiserver_out"
      apiserver_dir=${APISERVER_DIR:-$apiserver_out}
      client_cert=${CLIENT_CERT:-/etc/kubernetes/pki/webhook-client.crt}
      client_key=${CLIENT_KEY:-/etc/kubernetes/pki/webhook-client.key}
      for f in "${authorization[@]}"; do
        render "$f" "$apiserver_out/$(basename "$f")"
        sed -i -e "s|__HOSTPORT__|$hostport|g" -e "s|__APISERVER_DIR__|$apiserver_dir|g" \
          -e "s|__CLIENT_CERT__|$client_cert|g" -e "s|__CLIENT_KEY__|$client_key|g" "$apiserver_out/$(basename "$f")"
      done
      echo "for /authorize, add -authorization -client-ca-file CA -allowed-client-names NAME for the apiserver's client certificate" >&2
      echo "  (it then guards /mutate and /validate too: give the apiserver that certificate for admission webhooks" >&2
      echo "  as well, docs/operations.md's Security, or run a second webhook for /authorize alone)," >&2
      echo "  and start kube-apiserver with --authorization-config $apiserver_dir/authorization-config.yaml" >&2
    fi
    ;;
  static)
    # Manifest-based admission control (kube-apiserver 1.37, feature gate
    # ManifestBasedAdmissionControlConfig, beta and on by default; alpha and
    # off by default in 1.36; absent before, docs/versions.md). What the
    # apiserver requires, from its code (k8s.io/apiserver v0.37.1 and
    # k8s.io/kubernetes v1.37.1):
    # - each plugin reads its own directory: LoadMutatingManifests and
    #   LoadValidatingManifests (pkg/admission/plugin/webhook/manifest/loader)
    #   refuse the other kind with "unsupported resource type", so the two
    #   configurations go in two directories;
    # - every .yaml, .yml and .json file there is read, multi-document YAML
    #   and Lists included (manifest.LoadFiles);
    # - staticManifestsDir must be an absolute path to a directory
    #   (manifest.ValidateStaticManifestsDir);
    # - configuration names must end in .static.k8s.io
    #   (manifest.ValidateManifestName), and clientConfig must be a url
    #   (loader.ValidateWebhookClientConfig).
    tmp=$(mktemp)
    trap 'rm -f "$tmp"' EXIT
    url_webhooks "$tmp"
    mkdir -p "$out/mutating" "$out/validating"
    rm -f "$out/mutating/webhooks.yaml" "$out/validating/webhooks.yaml"
    # Each configuration's metadata.name (the only key indented by two
    # spaces) gets the reserved suffix; each document goes to its plugin's
    # directory by its kind.
    sed -E 's/^  name: (.+)$/  name: \1.static.k8s.io/' "$tmp" |
      awk -v mutating="$out/mutating/webhooks.yaml" -v validating="$out/validating/webhooks.yaml" '
        BEGIN { n = 0 }
        /^---$/ { n++; next }
        { doc[n] = doc[n] $0 "\n" }
        /^kind: MutatingWebhookConfiguration$/ { dest[n] = mutating }
        /^kind: ValidatingWebhookConfiguration$/ { dest[n] = validating }
        END {
          for (i = 0; i <= n; i++) {
            if (!(i in dest)) { print "render.sh: a document in deploy/webhooks.yaml is neither a MutatingWebhookConfiguration nor a ValidatingWebhookConfiguration" > "/dev/stderr"; exit 1 }
            if (seen[dest[i]]++) printf "---\n" > dest[i]
            printf "%s", doc[i] > dest[i]
          }
        }'
    cat > "$out/admission-config.yaml" <<YAML
# For kube-apiserver --admission-control-config-file=$out/admission-config.yaml,
# 1.37 or later (on 1.36, add --feature-gates=ManifestBasedAdmissionControlConfig=true).
# Each plugin loads the webhook configurations in its own directory at
# start-up, and again whenever a file there changes. An older apiserver exits
# at start-up: 1.33-1.35 do not know staticManifestsDir and say
#   couldn't init admission plugin "MutatingAdmissionWebhook": kubeConfigFile: Invalid value: "": must be an absolute file path
# and 1.36 without the gate says
#   staticManifestsDir: Forbidden: staticManifestsDir requires the ManifestBasedAdmissionControlConfig feature gate to be enabled
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    staticManifestsDir: "$out/mutating"
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    staticManifestsDir: "$out/validating"
YAML
    render_reads
    echo "run the webhook where https://$hostport reaches it:" >&2
    echo "  webhook -listen $listen -tls-cert-file $certs/tls.crt -tls-private-key-file $certs/tls.key${reads:+ -kubeconfig KUBECONFIG}" >&2
    [ -z "$reads" ] || echo "  with KUBECONFIG a kubeconfig of the ServiceAccount $namespace/$name; kubectl apply -f $out lets it read what the policy reads (docs/deploy.md)" >&2
    echo "rendered into $out; start kube-apiserver with --admission-control-config-file=$out/admission-config.yaml" >&2
    echo "  (kube-apiserver 1.37 or later, or 1.36 with --feature-gates=ManifestBasedAdmissionControlConfig=true;" >&2
    echo "  an older one exits at start-up with: kubeConfigFile: Invalid value: \"\": must be an absolute file path)" >&2
    exit 0
    ;;
esac
echo "rendered into $out; apply with: kubectl apply -f $out" >&2
