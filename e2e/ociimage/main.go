// Command ociimage builds the webhook's container image as the Dockerfile
// does, without a Docker engine or a registry: the static binary, built
// from the files .dockerignore lets into the build context, on a root
// filesystem that stands in for distroless's static-debian12:nonroot, run
// as 65532:65532, with no shell, no package manager and no libc. It writes
// an OCI image archive that `ctr images import` loads into containerd, as
// `make image` and the e2e suite's node do.
//
//	go run ./ociimage -o webhook.tar -name webhook:dev      # from e2e/
//	go run ./ociimage -pause -o pause.tar -name NAME        # the node's sandbox image
//
// docs/deploy.md says what the root filesystem lacks of distroless's.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// nonroot is distroless's nonroot user and group, which the Dockerfile and
// the Deployment run as.
const nonroot = 65532

// epoch is every file's modification time, so that the same sources make
// the same image, byte for byte.
var epoch = time.Unix(0, 0).UTC()

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	flags := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	flags.SetOutput(stderr)
	out := flags.String("o", "", "the OCI archive to write (`file`)")
	name := flags.String("name", "webhook:latest", "the image's `reference`, as a Pod's image names it")
	repo := flags.String("repo", "..", "the webhook's repository `root`")
	version := flags.String("version", "", "the webhook's `version`, as the Dockerfile's VERSION build argument; default: the repository's git description")
	pause := flags.Bool("pause", false, "build the node's sandbox (pause) image instead of the webhook's")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" || flags.NArg() > 0 {
		return errors.New("usage: ociimage -o FILE [-name REF] [-repo DIR] [-version V] [-pause]")
	}
	work, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	var img image
	if *pause {
		img, err = pauseImage(work)
	} else {
		img, err = webhookImage(*repo, *version, work)
	}
	if err != nil {
		return err
	}
	return img.write(*out, *name)
}

// image is what an archive holds: one layer, and the runtime settings of
// the image's config.
type image struct {
	layer      []byte // an uncompressed tar
	user       string
	entrypoint []string
	ports      []string
	workingDir string
}

// webhookImage builds the binary as the Dockerfile's build stage does, in
// the build context .dockerignore makes, and lays it on the root filesystem.
func webhookImage(repo, version, work string) (image, error) {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return image{}, err
	}
	if version == "" {
		version = gitVersion(repo)
	}
	context := filepath.Join(work, "context")
	if err := dockerContext(repo, context); err != nil {
		return image{}, err
	}
	bin := filepath.Join(work, "webhook")
	// The Dockerfile's build line.
	if err := goBuild(context, bin, ".", "-trimpath", "-ldflags", "-s -w -X main.version="+version); err != nil {
		return image{}, err
	}
	layer, err := rootFS(bin, "/webhook")
	if err != nil {
		return image{}, err
	}
	return image{layer: layer, user: fmt.Sprintf("%d:%d", nonroot, nonroot), entrypoint: []string{"/webhook"},
		ports: []string{"8443/tcp"}, workingDir: "/home/nonroot"}, nil
}

// pauseImage is the sandbox image containerd starts first in every Pod, to
// hold its namespaces: a static program that waits for a signal, run as
// 65535, as registry.k8s.io/pause runs.
func pauseImage(work string) (image, error) {
	src, err := filepath.Abs("ociimage/pause")
	if err != nil {
		return image{}, err
	}
	bin := filepath.Join(work, "pause")
	if err := goBuild(src, bin, ".", "-trimpath", "-ldflags", "-s -w"); err != nil {
		return image{}, err
	}
	var b layerBuilder
	b.file("/pause", 0o755, 0, 0, mustRead(bin))
	layer, err := b.bytes()
	return image{layer: layer, user: "65535:65535", entrypoint: []string{"/pause"}, workingDir: "/"}, err
}

func mustRead(path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err) // written a moment ago by this program
	}
	return data
}

// rootFS is distroless static's root filesystem as far as a static Go
// binary can tell: the users and groups it knows, name resolution from
// files first, the CA certificates, a /tmp anyone may write to and
// nonroot's home; and the binary at path.
func rootFS(bin, path string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var b layerBuilder
	b.dir("/etc", 0o755, 0, 0)
	b.file("/etc/passwd", 0o644, 0, 0, []byte(
		"root:x:0:0:root:/root:/sbin/nologin\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	b.file("/etc/group", 0o644, 0, 0, []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"))
	b.file("/etc/nsswitch.conf", 0o644, 0, 0, []byte("hosts: files dns\n"))
	// The host's Debian bundle, as distroless copies Debian's; a Go
	// program needs no more than this one file of it.
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		b.dir("/etc/ssl", 0o755, 0, 0)
		b.dir("/etc/ssl/certs", 0o755, 0, 0)
		b.file("/etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0, ca)
	}
	b.dir("/home", 0o755, 0, 0)
	b.dir("/home/nonroot", 0o700, nonroot, nonroot)
	b.dir("/root", 0o700, 0, 0)
	b.dir("/tmp", 0o1777, 0, 0)
	b.file(path, 0o755, 0, 0, data)
	return b.bytes()
}

// layerBuilder writes a layer's tar, entries in the order given.
type layerBuilder struct {
	buf bytes.Buffer
	tw  *tar.Writer
	err error
}

func (b *layerBuilder) header(h *tar.Header) {
	if b.tw == nil {
		b.tw = tar.NewWriter(&b.buf)
	}
	if b.err != nil {
		return
	}
	h.Name = strings.TrimPrefix(h.Name, "/")
	h.ModTime, h.Format = epoch, tar.FormatPAX
	b.err = b.tw.WriteHeader(h)
}

func (b *layerBuilder) dir(path string, mode int64, uid, gid int) {
	b.header(&tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: mode, Uid: uid, Gid: gid})
}

func (b *layerBuilder) file(path string, mode int64, uid, gid int, data []byte) {
	b.header(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Uid: uid, Gid: gid, Size: int64(len(data))})
	if b.err == nil {
		_, b.err = b.tw.Write(data)
	}
}

func (b *layerBuilder) bytes() ([]byte, error) {
	if b.err == nil {
		b.err = b.tw.Close()
	}
	return b.buf.Bytes(), b.err
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

// write writes the OCI image layout as a tar: oci-layout, index.json naming
// the image (containerd reads io.containerd.image.name), and the blobs.
func (img image) write(path, name string) error {
	blobs := map[string][]byte{}
	add := func(mediaType string, data []byte) descriptor {
		sum := sha256.Sum256(data)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		blobs[digest] = data
		return descriptor{MediaType: mediaType, Digest: digest, Size: len(data)}
	}
	layer := add("application/vnd.oci.image.layer.v1.tar", img.layer)
	exposed := map[string]struct{}{}
	for _, p := range img.ports {
		exposed[p] = struct{}{}
	}
	config, err := json.Marshal(map[string]any{
		"created":      epoch,
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"User":         img.user,
			"Entrypoint":   img.entrypoint,
			"ExposedPorts": exposed,
			"Env":          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"WorkingDir":   img.workingDir,
		},
		// A tar's digest is its diff ID: the layer is not compressed.
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{layer.Digest}},
		"history": []map[string]any{{"created": epoch, "created_by": "e2e/ociimage"}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        add("application/vnd.oci.image.config.v1+json", config),
		"layers":        []descriptor{layer},
	})
	if err != nil {
		return err
	}
	m := add("application/vnd.oci.image.manifest.v1+json", manifest)
	m.Annotations = map[string]string{
		"io.containerd.image.name":          normalized(name),
		"org.opencontainers.image.ref.name": name[strings.LastIndex(name, ":")+1:],
	}
	m.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{m},
	})
	if err != nil {
		return err
	}

	var b layerBuilder
	b.file("oci-layout", 0o644, 0, 0, []byte(`{"imageLayoutVersion":"1.0.0"}`))
	b.file("index.json", 0o644, 0, 0, index)
	b.dir("blobs", 0o755, 0, 0)
	b.dir("blobs/sha256", 0o755, 0, 0)
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		b.file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), 0o644, 0, 0, blobs[d])
	}
	archive, err := b.bytes()
	if err != nil {
		return err
	}
	return os.WriteFile(path, archive, 0o644)
}

// normalized is the reference as kubelet and containerd spell it in full:
// webhook:dev is docker.io/library/webhook:dev.
func normalized(name string) string {
	first, _, found := strings.Cut(name, "/")
	switch {
	case !found:
		return "docker.io/library/" + name
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return name
	default:
		return "docker.io/" + name
	}
}

// gitVersion is what `git describe` says of the repository, as the
// Makefile passes it to the Dockerfile; "dev" without git.
func gitVersion(repo string) string {
	out, err := exec.Command("git", "-C", repo, "describe", "--always", "--dirty", "--tags").Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

func goBuild(dir, out, pkg string, flags ...string) error {
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %w\n%s", dir, err, output)
	}
	return nil
}

// dockerContext copies into dir the files of the repository that
// .dockerignore lets into the image's build context, as docker decides:
// patterns in order, the last one that matches a path or one of its parent
// directories wins, and "!" lets it in.
func dockerContext(repo, dir string) error {
	text, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		return err
	}
	var patterns []string
	for _, line := range strings.Split(string(text), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	included := func(rel string) bool {
		in := true
		for _, p := range patterns {
			pattern, letIn := strings.CutPrefix(p, "!")
			for d := rel; d != "."; d = filepath.Dir(d) {
				if ok, _ := filepath.Match(pattern, d); ok {
					in = letIn
					break
				}
			}
		}
		return in
	}
	return filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(repo, path)
		if !included(rel) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
}
