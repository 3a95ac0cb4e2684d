# The README's commands, kept short. `make test` is what CI runs.
GO ?= go

.PHONY: test unit fuzz e2e e2e-oldest e2e-versions capture check run image node-tools bench bench-smoke bench-tools

# Everything: static checks, unit tests with the race detector, a short fuzz
# run, and the end-to-end suite against a real kube-apiserver: all of it on
# the newest minor, the groups below on the oldest.
test: check unit fuzz e2e e2e-oldest

# The fast loop: one to three minutes on 2 cores (the race detector on), no apiserver.
# UNIT_COUNT= (empty) lets go test take what its cache holds.
UNIT_COUNT ?= -count=1
unit:
	$(GO) test -race $(UNIT_COUNT) ./...

# gofmt, go vet of the three modules, and that every relative link and
# #anchor in README.md, docs/ and bench/README.md points somewhere. The
# first vet of e2e/ compiles client-go and k8s.io/apiserver: about 5
# minutes cold on the 2-core machine (docs/testing.md).
check:
	@out=$$(git ls-files --cached --others --exclude-standard '*.go' | while read -r f; do [ ! -e "$$f" ] || echo "$$f"; done | xargs gofmt -l); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GO) test -count=1 -run '^(TestDocLinks|TestHeadingAnchors)$$' .

# The generic path, /authorize's, the policy, review's audit log reader,
# then the tests' JSON Patch applier against the apiserver's
# (e2e/jsonpatch): go test fuzzes one target at a time.
# Each target runs a count of inputs, not a time: with -fuzztime of a
# duration, go1.26's coordinator can fail the run with "context deadline
# exceeded" as the time ends, no input at fault (golang/go#75804, fixed in
# go1.27; a cold CI run failed on it). The counts take 2-14 s each here.
# Each new input that widens coverage is minimized for at most 1 s, not
# go test's 60 s: minimizing a review of kilobytes took the whole run, and
# FuzzServe ran 53 inputs in its 15 s. A crasher is still written, if less
# minimized.
FUZZ = $(GO) test -run '^$$' -fuzzminimizetime 1s
fuzz:
	$(FUZZ) -fuzz '^FuzzServe$$' -fuzztime 20000x .
	[ ! -d authorize ] || $(FUZZ) -fuzz '^FuzzAuthorize$$' -fuzztime 20000x ./authorize
	$(FUZZ) -fuzz '^FuzzPolicy$$' -fuzztime 20000x .
	[ ! -d review ] || $(FUZZ) -fuzz '^FuzzAuditLog$$' -fuzztime 20000x ./review
	cd e2e && $(FUZZ) -fuzz '^FuzzApplyOps$$' -fuzztime 100000x ./jsonpatch
	cd e2e && $(FUZZ) -fuzz '^FuzzApply$$' -fuzztime 100000x ./jsonpatch

# The whole suite against the newest kube-apiserver in e2e/kube
# (docs/versions.md), summarized (e2e/summary): a line per test, each
# skip's reason, and each failure's whole output.
e2e: node-tools
	cd e2e && $(GO) test -count=1 -timeout 30m -json ./... | $(GO) run ./summary

# The oldest minor the project supports, and the tests that ask something of
# the apiserver's version: the admission contract, the demonstration, TLS and
# mTLS, deploy (service and URL mode), doctor, authorization, matchConditions,
# rollout (warnings and audit annotations), what the apiserver's client does
# with overload, hostile clients, a burst of large writes and a burst above
# the connection cap, a view of the cluster (list, watch with bookmarks,
# undecided), and static manifests (which skip before 1.37, naming the
# version). Left out: what only the webhook binary does (SIGTERM, the
# image).
E2E_OLDEST = 1.33
E2E_GROUPS = ^(TestServerVersion|TestViewOfTheCluster|TestContractVerifyAdmissionResponse|TestCapture|TestRequests|TestHTTP2|TestWebhookDown|TestWebhookTooSlow|TestDemonstration.*|TestAdmissionMatchConditions|TestRotationUnderLoad|TestMutualTLS|TestDeployManifests|TestURLMode|TestRenderedModesAgree|TestDoctor|TestAuthorization|TestValidationActions|TestPolicyWarning|TestOverloadAnswer|TestHostileClients|TestMemoryUnderBurst|TestBurstServed|TestStatic.*)$$

e2e-oldest:
	cd e2e && E2E_KUBE_VERSION=$(E2E_OLDEST) $(GO) test -count=1 -timeout 30m -json -run '$(E2E_GROUPS)' . | $(GO) run ./summary

# The same groups on every minor in e2e/kube, and the table of
# docs/versions.md. Not in CI: each minor's first run builds its
# kube-apiserver (about 5 minutes).
e2e-versions:
	cd e2e && $(GO) run ./versions -run '$(E2E_GROUPS)'

# Re-record testdata/*.json, authorize/testdata/*.json,
# review/testdata/audit/e2e.log and review/apiresources.json from a real
# kube-apiserver, then refresh goldens.
capture:
	cd e2e && $(GO) test -count=1 -run 'TestCapture|TestAuthorization|TestAuditReplay|TestReviewAPIResources' -capture .
	$(GO) test -run TestFixtures -update .

run:
	$(GO) run .

# The image, as the Dockerfile builds it, without a Docker engine or a
# registry: an OCI archive to load into a node (ctr -n k8s.io images import
# FILE; kind load image-archive FILE) or to push (skopeo copy
# oci-archive:FILE docker://REGISTRY/webhook:TAG). docs/deploy.md says how
# its root filesystem differs from distroless's.
IMAGE ?= webhook:latest
IMAGE_ARCHIVE ?= webhook-image.tar
image:
	cd e2e && $(GO) run ./ociimage -o $(abspath $(IMAGE_ARCHIVE)) -name $(IMAGE) -repo ..

# What the e2e suite's node runs from the machine's packages: containerd,
# runc and the CNI plugins, and iptables for kube-proxy (docs/testing.md);
# kubectl, for the README's own commands, comes with these machines. As
# root, as CI runs.
NODE_PACKAGES = containerd runc containernetworking-plugins iptables
node-tools:
	@command -v kubectl >/dev/null || echo "make node-tools: the e2e node's tests run kubectl, which is not installed: they will fail"
	@missing=; for c in containerd ctr runc iptables nsenter /usr/lib/cni/bridge; do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "make node-tools: the e2e node needs$$missing; as root: apt-get install $(NODE_PACKAGES)"; exit 0; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(NODE_PACKAGES) >/dev/null; \
	fi

# The load generator, from Debian's packages: the next machine starts bare.
bench-tools:
	@command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; }

# The webhook against the limit of a bare net/http server, written to
# bench/results/ (about 10 minutes), and the in-process benchmarks.
bench: bench-tools
	cd bench && $(GO) run .
	$(GO) test -run '^$$' -bench . -benchmem -count 5 .

# CI: that the benchmark works, not how fast (about 30 seconds).
bench-smoke: bench-tools
	cd bench && $(GO) run . -smoke > /dev/null
	$(GO) test -run '^$$' -bench . -benchtime 1x .
