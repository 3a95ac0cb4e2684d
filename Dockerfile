# The webhook as a distroless image: a static binary, nothing else.
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t webhook .
# make image builds the same without a Docker engine (docs/deploy.md).
# The builder is pinned to the Go release go.mod names; pin it by digest in
# your own registry for reproducible builds.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# The sources .dockerignore lets in: the root package and the packages one
# or two folders below it (doctor/, cluster/kubeclient/), without tests,
# and what they embed.
COPY . ./
# Static (no cgo), no paths of this machine in the binary, no symbol
# tables; the version webhook -version and its start-up log say.
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /webhook .

# No shell, no package manager, no libc: the binary and CA certificates only.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /webhook /webhook
# nonroot: the same uid/gid the Deployment's securityContext insists on.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/webhook"]
