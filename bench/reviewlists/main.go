// Command reviewlists writes the inputs bench/README.md's "Reviewing
// manifests" measures `webhook review` on: what `kubectl get deployments
// -A -o yaml` and `-o json` print for a cluster of many Deployments, one
// List each, as kubectl prints them (its keys sorted, `kind: List` after
// the items): the YAML about -mib MiB, the JSON of the same Deployments.
//
//	cd bench && go run ./reviewlists -dir /tmp/lists            # 51 MiB each
//	cd bench && go run ./reviewlists -dir /tmp/lists -mib 5
//
// Each Deployment is the root module's testdata/v1-deployment-create.json
// object as the apiserver stores it (its defaults, status, uid,
// resourceVersion, managedFields), about 3.3 KB of YAML, each with a name
// of its own in one of 200 namespaces, a third of them annotated as the
// demonstration's /validate requires.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reviewlists:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "`directory` to write deployments.yaml and deployments.json into")
	mib := flag.Int("mib", 51, "the size of each List, in `MiB`")
	flag.Parse()
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join("..", "testdata", "v1-deployment-create.json"))
	if err != nil {
		return err
	}
	var review struct {
		Request struct {
			Object map[string]any `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(b, &review); err != nil {
		return err
	}
	count := -1
	for _, format := range []string{"yaml", "json"} {
		path := filepath.Join(*dir, "deployments."+format)
		n, err := writeList(path, format, review.Request.Object, int64(*mib)<<20, count)
		if err != nil {
			return err
		}
		count = n
		info, _ := os.Stat(path)
		fmt.Printf("%s: %d Deployments, %.1f MiB\n", path, n, float64(info.Size())/(1<<20))
	}
	return nil
}

// writeList writes a List of Deployments made from template, as kubectl
// prints it in format: count of them, or when count is negative as many
// as make it size bytes long.
func writeList(path, format string, template map[string]any, size int64, count int) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var written int64
	write := func(s []byte) error {
		written += int64(len(s))
		_, err := w.Write(s)
		return err
	}
	if format == "yaml" {
		err = write([]byte("apiVersion: v1\nitems:\n"))
	} else {
		err = write([]byte("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n"))
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for ; (count < 0 && written < size) || n < count; n++ {
		d := stored(template, n)
		var item []byte
		if format == "yaml" {
			y, err := yaml.Marshal(d)
			if err != nil {
				return 0, err
			}
			// An item of the sequence, as kubectl indents it: "- " before
			// the first line, two spaces before the others.
			item = append([]byte("- "), indent(y, "  ")...)
		} else {
			j, err := json.MarshalIndent(d, "        ", "    ")
			if err != nil {
				return 0, err
			}
			sep := ",\n"
			if n == 0 {
				sep = ""
			}
			item = append([]byte(sep+"        "), j...)
		}
		if err := write(item); err != nil {
			return 0, err
		}
	}
	if format == "yaml" {
		err = write([]byte("kind: List\nmetadata:\n  resourceVersion: \"\"\n"))
	} else {
		err = write([]byte("\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n"))
	}
	if err != nil {
		return 0, err
	}
	return n, w.Flush()
}

// indent prefixes every line of y but the first with prefix.
func indent(y []byte, prefix string) []byte {
	var out []byte
	for i, c := range y {
		out = append(out, c)
		if c == '\n' && i < len(y)-1 {
			out = append(out, prefix...)
		}
	}
	return out
}

// stored is template as the apiserver stores the n-th Deployment: named
// and placed, with its defaults and a status.
func stored(template map[string]any, n int) map[string]any {
	var d map[string]any
	b, _ := json.Marshal(template)
	_ = json.Unmarshal(b, &d)
	meta := d["metadata"].(map[string]any)
	meta["name"] = fmt.Sprintf("web-%d", n)
	meta["namespace"] = fmt.Sprintf("ns-%d", n%200)
	meta["uid"] = fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	meta["resourceVersion"] = fmt.Sprint(1000 + n)
	meta["generation"] = 1
	meta["creationTimestamp"] = "2026-11-26T10:00:00Z"
	annotations := map[string]any{"deployment.kubernetes.io/revision": "1"}
	if n%3 == 0 {
		annotations["webhook.example.com/allow"] = "true"
	}
	meta["annotations"] = annotations
	spec := d["spec"].(map[string]any)
	spec["progressDeadlineSeconds"] = 600
	spec["revisionHistoryLimit"] = 10
	spec["strategy"] = map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": "25%", "maxUnavailable": "25%"}}
	if tmpl, ok := spec["template"].(map[string]any); ok {
		if podSpec, ok := tmpl["spec"].(map[string]any); ok {
			podSpec["dnsPolicy"] = "ClusterFirst"
			podSpec["restartPolicy"] = "Always"
			podSpec["schedulerName"] = "default-scheduler"
			podSpec["securityContext"] = map[string]any{}
			podSpec["terminationGracePeriodSeconds"] = 30
			if containers, ok := podSpec["containers"].([]any); ok {
				for _, c := range containers {
					if c, ok := c.(map[string]any); ok {
						c["imagePullPolicy"] = "IfNotPresent"
						c["resources"] = map[string]any{}
						c["terminationMessagePath"] = "/dev/termination-log"
						c["terminationMessagePolicy"] = "File"
					}
				}
			}
		}
	}
	d["status"] = map[string]any{
		"availableReplicas": 1, "observedGeneration": 1, "readyReplicas": 1, "replicas": 1, "updatedReplicas": 1,
		"conditions": []any{
			map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability.",
				"lastTransitionTime": "2026-11-26T10:00:05Z", "lastUpdateTime": "2026-11-26T10:00:05Z"},
			map[string]any{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": fmt.Sprintf("ReplicaSet \"web-%d-6d4cf56db6\" has successfully progressed.", n),
				"lastTransitionTime": "2026-11-26T10:00:00Z", "lastUpdateTime": "2026-11-26T10:00:05Z"},
		},
	}
	return d
}
