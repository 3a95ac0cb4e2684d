package e2e

import (
	"context"
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
	if lists, watches := series("webhook_view_lists_total"), series("webhook_view_watches_total"); lists != 1 || watches != 1 {
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
