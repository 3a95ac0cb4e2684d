package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lookupPolicy is a policy.go of the suite's own that reads the cluster:
// a view of every ConfigMap, looked up on every review.
const lookupPolicy = "testdata/lookup-policy.go"

// loadBinary is the webhook the load tests run (TestMemoryUnderBurst,
// TestHostileClients, TestBurstServed, TestOverloadAnswer), so that every
// review they send looks the cluster up, with a view in the process: the
// webhook's own when its policy reads the cluster, else the one built
// with lookupPolicy, which admits every request as the deployed policy's
// admitted requests are. What they test is the plumbing under load.
func loadBinary(t *testing.T) string {
	t.Helper()
	if len(readsOf(t, webhookBinary)) > 0 {
		return webhookBinary
	}
	return lookupPolicyBinary(t)
}

// lookupPolicyBinary is the webhook built with lookupPolicy, once a run.
func lookupPolicyBinary(t *testing.T) string {
	t.Helper()
	skipWithoutPart(t, "cluster", "view of the cluster for a policy to read")
	lookupBinary.once.Do(func() {
		lookupBinary.path = filepath.Join(workDir, "webhook-lookup")
		lookupBinary.err = buildWithPolicyTo(lookupPolicy, lookupBinary.path)
	})
	if lookupBinary.err != nil {
		t.Fatalf("building the webhook with %s as its policy.go: %v", lookupPolicy, lookupBinary.err)
	}
	return lookupBinary.path
}

var lookupBinary struct {
	once sync.Once
	path string
	err  error
}

// TestViewOfTheCluster runs the webhook built with lookupPolicy, whose
// every review looks its namespace up in a view of the cluster's
// ConfigMaps, reading the suite's apiserver with exactly the RBAC `webhook
// reads -o rbac` renders. Fifty of the policy's admitted requests are
// admitted, and the webhook's view cost the apiserver one list and one
// watch, not a request per review. A ConfigMap created is in the view
// soon after (how soon is logged, for bench/README.md). Once the view holds
// the ConfigMap that makes the policy answer undecided, a request in its
// namespace is refused under failurePolicy Fail, the user reading the
// policy's reason, and admitted under Ignore.
func TestViewOfTheCluster(t *testing.T) {
	ctx := context.Background()
	bin := lookupPolicyBinary(t)
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil, "-metrics-listen=127.0.0.1:0")
	metrics := "http://" + w.metricsAddr(t) + "/metrics"
	series := func(name string) float64 {
		t.Helper()
		return scrapedValue(t, metrics, name+`{resource="configmaps"}`)
	}

	scope := newScope(t, "view")
	registerDeployed(t, w, scope, hookOptions{})
	for i := range 50 {
		if err := scope.sendThroughAll(ctx, fmt.Sprintf("looked-up-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if lists, watches := series("webhook_view_list_requests_total"), series("webhook_view_watch_requests_total"); lists != 1 || watches != 1 {
		t.Errorf("after 50 requests, the view sent %v lists and %v watches, want 1 of each", lists, watches)
	}

	// How long a change takes to reach the view: the time from the
	// apiserver's answer to a create to the view holding one more.
	var took []time.Duration
	for i := range 20 {
		before := series("webhook_view_objects")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("seen-%d", i)}}
		if _, err := apiserver.client.CoreV1().ConfigMaps(scope.namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		for series("webhook_view_objects") <= before {
			if time.Since(created) > 10*time.Second {
				t.Fatalf("the view did not see ConfigMap %s within 10 s", cm.Name)
			}
			time.Sleep(time.Millisecond)
		}
		took = append(took, time.Since(created))
	}
	slices.Sort(took)
	t.Logf("a created ConfigMap reached the view in %v (median of 20), %v at most, scraping the metrics every millisecond; the view holds %v ConfigMaps", took[len(took)/2], took[len(took)-1], series("webhook_view_objects"))

	// Undecided: refused under Fail with the policy's reason, admitted
	// under Ignore.
	for _, tc := range []struct {
		policy admissionregistrationv1.FailurePolicyType
		want   string
	}{
		{admissionregistrationv1.Fail, "holds the ConfigMap e2e-undecided"},
		{admissionregistrationv1.Ignore, ""},
	} {
		undecided := newScope(t, "undecided-"+strings.ToLower(string(tc.policy)))
		registerDeployed(t, w, undecided, hookOptions{failurePolicy: tc.policy})
		before := series("webhook_view_objects")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-undecided"}}
		if _, err := apiserver.client.CoreV1().ConfigMaps(undecided.namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); series("webhook_view_objects") <= before; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the view did not see e2e-undecided within 10 s")
			}
		}
		err := undecided.sendThroughAll(ctx, "undecided")
		t.Logf("failurePolicy %s: the undecided request got %v", tc.policy, err)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("failurePolicy Ignore: got %v, want the undecided request admitted", err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "failed calling webhook") || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("failurePolicy Fail: got %v, want the call failed with the policy's reason %q", err, tc.want)
		}
		if !w.loggedLine(func(line string) bool {
			return loggedName(line, undecided.name("undecided")) && (strings.Contains(line, `"code":503`) || strings.Contains(line, "code=503"))
		}) {
			t.Errorf("the webhook logged no 503 for the undecided request")
		}
	}
	if rss := peakRSS(t, w.cmd.Process.Pid); rss > 0 {
		t.Logf("the webhook's peak RSS: %.1f MiB", float64(rss)/(1<<20))
	}
}

// TestViewOfManyObjects, when E2E_VIEW_OBJECTS is set, stores that many
// ConfigMaps, then starts the webhook built with lookupPolicy and logs how
// long its view takes to sync and its peak RSS (bench/README.md). It is a
// measurement, not in the suite's runs.
func TestViewOfManyObjects(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("E2E_VIEW_OBJECTS"))
	if n == 0 {
		t.Skip("E2E_VIEW_OBJECTS is not set: a measurement of the view at that many ConfigMaps")
	}
	ctx := context.Background()
	bin := lookupPolicyBinary(t)
	ns := createLabelledNamespaceIn(t, apiserver, "view-many", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for writer := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := writer; i < n; i += 32 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("many-%06d", i), Labels: map[string]string{"app.kubernetes.io/name": "web"}}, Data: map[string]string{"key": "value"}}
				if _, err := apiserver.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	start := time.Now()
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil, "-metrics-listen=127.0.0.1:0")
	t.Logf("with %d ConfigMaps stored, the webhook was ready (its view synced) %v after it started; peak RSS %.1f MiB; the view holds %v",
		n, time.Since(start).Round(time.Millisecond), float64(peakRSS(t, w.cmd.Process.Pid))/(1<<20),
		scrapedValue(t, "http://"+w.metricsAddr(t)+"/metrics", `webhook_view_objects{resource="configmaps"}`))
}

// scrapedValue returns the value of one series, named with its labels as
// the text format writes them, from the metrics at url; the test fails
// when there is none.
func scrapedValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("the metrics have no %s", series)
	return 0
}

// TestClaimGuard is the claim guard of a copier's policy, in lookupPolicy:
// deleting a PersistentVolumeClaim is denied while a Pod of its namespace
// mounts it. Two hundred times, a Pod is created that mounts a new claim,
// and the claim is deleted at once: with the Pods read as of now
// (ListLatest of the namespace, or GetLatest of the one Pod) every delete
// is denied; from the view alone (indexed, the claims named view-*), some
// may be let through, the Pod not yet in the view.
// It logs what each costs (bench/README.md): the time a delete takes, and
// the requests the lookups sent the apiserver.
func TestClaimGuard(t *testing.T) {
	ctx := context.Background()
	bin := lookupPolicyBinary(t)
	// Every delete reads as of now: the rate is above their peak, here
	// 20 to 40 a second, one after another.
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil, "-metrics-listen=127.0.0.1:0", "-apiserver-lookups-per-second=100")
	metrics := "http://" + w.metricsAddr(t) + "/metrics"
	scope := newScope(t, "claims")
	ns := scope.namespace
	registerValidating(t, hookOptions{name: "claims-" + ns + ".webhook.example.com", url: w.url("/validate"), caBundle: w.caPEM, scope: scope,
		rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"persistentvolumeclaims"}},
		}}})
	claims, pods := apiserver.client.CoreV1().PersistentVolumeClaims(ns), apiserver.client.CoreV1().Pods(ns)
	// guarded creates a Pod mounting a new claim, deletes the claim at
	// once, and says whether the delete was denied, and how long it took.
	guarded := func(claim string) (bool, time.Duration) {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
		if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mounts-" + claim}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		err := claims.Delete(ctx, claim, metav1.DeleteOptions{})
		took := time.Since(began)
		switch {
		case err == nil:
			return false, took
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is mounted by 1 Pod(s)"):
			return true, took
		}
		t.Fatalf("deleting claim %s: got %v, want it denied or done", claim, err)
		return false, took
	}
	// Until the apiserver calls the new webhook.
	for i := 0; ; i++ {
		if denied, _ := guarded(fmt.Sprint("probe-", i)); denied {
			break
		}
		if i == 50 {
			t.Fatal("the apiserver did not call the claim guard within 50 tries")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, way := range []struct {
		name, prefix, verb string
		wantAll            bool
	}{
		{"the namespace's Pods read as of now (ListLatest)", "latest-", "list", true},
		{"the one Pod read as of now (GetLatest)", "get-", "get", true},
		{"from the view alone (indexed)", "view-", "list", false},
	} {
		lookups := func() (sent, shared float64) {
			m := scrape(t, metrics)
			return m[`webhook_view_apiserver_lookups_total{outcome="sent",resource="pods",verb="`+way.verb+`"}`], m[`webhook_view_apiserver_lookups_total{outcome="shared",resource="pods",verb="`+way.verb+`"}`]
		}
		sentBefore, sharedBefore := lookups()
		denied := 0
		var took []time.Duration
		for i := range 200 {
			ok, d := guarded(fmt.Sprint(way.prefix, i))
			if ok {
				denied++
			}
			took = append(took, d)
		}
		sent, shared := lookups()
		slices.Sort(took)
		t.Logf("%s: %d of 200 deletes denied; a delete took %v (median), %v (p90), %v at most; the lookups sent the apiserver %v %s requests for Pods (%v shared)",
			way.name, denied, took[100].Round(10*time.Microsecond), took[180].Round(10*time.Microsecond), took[199].Round(10*time.Microsecond), sent-sentBefore, way.verb, shared-sharedBefore)
		if way.wantAll && denied != 200 {
			t.Errorf("%s: %d of 200 deletes denied, want every one", way.name, denied)
		}
	}
}

// TestViewLookupsUnderAFlood: a flood of made-up reviews, each a delete of
// a claim in a namespace of its own, each of which the claim guard
// (lookupPolicy) would read as of now, sends the apiserver no more lists
// than -apiserver-lookups-per-second allows (10 here, one second's worth
// at once), counted by the apiserver itself; the reviews over the rate are
// answered undecided, saying so.
func TestViewLookupsUnderAFlood(t *testing.T) {
	const rate = 10
	bin := lookupPolicyBinary(t)
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil, "-metrics-listen=127.0.0.1:0", fmt.Sprint("-apiserver-lookups-per-second=", rate))
	metrics := "http://" + w.metricsAddr(t) + "/metrics"
	captured, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "v1-deployment-delete.json"))
	if err != nil {
		t.Fatal(err)
	}
	var review map[string]any
	if err := json.Unmarshal(captured, &review); err != nil {
		t.Fatal(err)
	}
	request := review["request"].(map[string]any)
	request["kind"] = map[string]any{"group": "", "version": "v1", "kind": "PersistentVolumeClaim"}
	request["resource"] = map[string]any{"group": "", "version": "v1", "resource": "persistentvolumeclaims"}
	podLists := func() float64 {
		body, err := apiserver.client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="pods"`) && strings.Contains(line, `verb="LIST"`) {
				v, _ := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndex(line, " "):]), 64)
				n += v
			}
		}
		return n
	}
	listsBefore := podLists()
	var mu sync.Mutex
	outcomes := map[string]int{}
	began := time.Now()
	var wg sync.WaitGroup
	for worker := range 8 {
		wg.Go(func() {
			for i := 0; time.Since(began) < 5*time.Second; i++ {
				mu.Lock()
				request["namespace"], request["name"], request["uid"] = fmt.Sprintf("made-up-%d-%d", worker, i), "claim", fmt.Sprintf("uid-%d-%d", worker, i)
				body, err := json.Marshal(review)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				resp, err := w.client.Post(w.url("/validate"), "application/json", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				outcome := fmt.Sprint(resp.StatusCode)
				if strings.Contains(string(answer), "-apiserver-lookups-per-second") {
					outcome += " over the rate"
				}
				mu.Lock()
				outcomes[outcome]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	lists := podLists() - listsBefore
	m := scrape(t, metrics)
	sent := m[`webhook_view_apiserver_lookups_total{outcome="sent",resource="pods",verb="list"}`]
	allowed := rate + rate*took.Seconds()
	t.Logf("a flood of made-up reviews for %s: answers %v; the webhook sent %v lists of Pods (%v refused over the rate), the apiserver counted %v; the rate allows %.0f",
		took.Round(time.Millisecond), outcomes, sent, m[`webhook_view_apiserver_lookups_total{outcome="refused",resource="pods",verb="list"}`], lists, allowed)
	if sent > allowed || lists > allowed {
		t.Errorf("the webhook sent %v lists, the apiserver counted %v, in %s: want at most %.0f", sent, lists, took, allowed)
	}
	if outcomes["503 over the rate"] == 0 {
		t.Errorf("got answers %v, want some undecided over the rate", outcomes)
	}
}
