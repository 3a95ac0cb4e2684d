#!/usr/bin/env bash
# Renders the manifests in deploy/ with certificates from `webhook certs`.
#
#   deploy/render.sh in-cluster OUT        # Service mode: Namespace, Deployment, Service,
#                                          # PDB, TLS Secret and both webhook configurations
#   deploy/render.sh url HOST:PORT OUT     # URL mode: both configurations for https://HOST:PORT,
#                                          # and in OUT/apiserver the authorization webhook's
#                                          # AuthorizationConfiguration and kubeconfig
#
# then `kubectl apply -f OUT`. Certificates go to OUT/certs (override with
# CERTS=dir). Run it again to renew the serving certificate: the CA in the
# certificate directory is kept, so caBundle does not change.
#
# Environment: WEBHOOK, the command that runs the webhook binary (default:
# `go run` of this repository); IMAGE, the Deployment's image (default
# webhook:latest). For OUT/apiserver: APISERVER_DIR, where its files will
# be on the control-plane host (default: OUT/apiserver itself);
# CLIENT_CERT and CLIENT_KEY, the client certificate the apiserver presents
# to /authorize, signed by a CA of the webhook's own (default:
# /etc/kubernetes/pki/webhook-client.crt and .key, as README.md's Security).
set -euo pipefail

usage() { sed -n '2,20p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case $mode in
  in-cluster) [ $# -eq 2 ] || usage; out=$2 ;;
  url) [ $# -eq 3 ] || usage; hostport=$2; out=$3 ;;
  *) usage ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
certs=${CERTS:-$out/certs}
mkdir -p "$certs"
certs=$(cd "$certs" && pwd)
image=${IMAGE:-webhook:latest}
if [ -n "${WEBHOOK:-}" ]; then
  webhook=($WEBHOOK)
else
  webhook=(go -C "$root" run .)
fi

# render FILE: copy FILE into OUT with the placeholders filled in.
render() {
  sed -e "s|__CA_BUNDLE__|$ca_bundle|g" -e "s|__IMAGE__|$image|g" "$1" > "${2:-$out}/$(basename "$1")"
}

case $mode in
  in-cluster)
    # The name the apiserver checks is <service>.<namespace>.svc.
    ca_bundle=$("${webhook[@]}" certs -dir "$certs" -service webhook -namespace webhook-system)
    for f in "$root"/deploy/in-cluster/*.yaml "$root"/deploy/webhooks.yaml; do render "$f"; done
    cat > "$out/secret.yaml" <<YAML
# The serving certificate and key from \`webhook certs\`; the CA's key stays
# in $certs and never enters the cluster.
apiVersion: v1
kind: Secret
metadata:
  name: webhook-tls
  namespace: webhook-system
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 < "$certs/tls.crt")
  tls.key: $(base64 -w0 < "$certs/tls.key")
YAML
    ;;
  url)
    host=${hostport%:*}
    host=${host#[}; host=${host%]}   # [::1]:8443 -> ::1
    ca_bundle=$("${webhook[@]}" certs -dir "$certs" -hosts "$host")
    render "$root/deploy/webhooks.yaml"
    # Each `service: {…, path: P, port: 443}` becomes `url: https://HOST:PORT/P`.
    sed -i -E "s#service: \{name: webhook, namespace: webhook-system, path: ([^,]+), port: 443\}#url: https://$hostport\1#" "$out/webhooks.yaml"
    sed -i -e '/# Service mode:/,/# checks its certificate/d' "$out/webhooks.yaml"
    if grep -qE '^ *service:' "$out/webhooks.yaml"; then
      echo "render.sh: a clientConfig in deploy/webhooks.yaml is not of the form service: {name: webhook, namespace: webhook-system, path: /P, port: 443}" >&2
      exit 1
    fi
    # The authorization webhook is configured on the apiserver's command
    # line, not through the API: its files go apart from what kubectl applies.
    apiserver_out="$out/apiserver"
    mkdir -p "$apiserver_out"
    apiserver_dir=${APISERVER_DIR:-$apiserver_out}
    client_cert=${CLIENT_CERT:-/etc/kubernetes/pki/webhook-client.crt}
    client_key=${CLIENT_KEY:-/etc/kubernetes/pki/webhook-client.key}
    for f in "$root"/deploy/url-mode/authorization-*.yaml; do
      render "$f" "$apiserver_out"
      sed -i -e "s|__HOSTPORT__|$hostport|g" -e "s|__APISERVER_DIR__|$apiserver_dir|g" \
        -e "s|__CLIENT_CERT__|$client_cert|g" -e "s|__CLIENT_KEY__|$client_key|g" "$apiserver_out/$(basename "$f")"
    done
    echo "run the webhook where https://$hostport reaches it:" >&2
    echo "  webhook -listen :${hostport##*:} -tls-cert-file $certs/tls.crt -tls-private-key-file $certs/tls.key" >&2
    echo "for /authorize, add -client-ca-file CA -allowed-client-names NAME for the apiserver's client certificate," >&2
    echo "  and start kube-apiserver with --authorization-config $apiserver_dir/authorization-config.yaml" >&2
    ;;
esac
echo "rendered into $out; apply with: kubectl apply -f $out" >&2
