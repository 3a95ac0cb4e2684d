package cluster

// What the policy reads of the cluster (policy.Reads), and the three ways
// its views are made through the one door, the policy value its makers
// take: kept in step with the apiserver by the server (watchCluster),
// filled from objects by a test, and from files by `webhook review
// -cluster` (fillViews); the server's lookups that ask the apiserver
// itself, within the operator's rate (apiserverReads); and `webhook
// reads`, which prints the kinds and the RBAC that lets the webhook read
// exactly them (deploy/render.sh).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/example/webhook/cluster/kubeclient"
	"github.com/example/webhook/promtext"
)

// Kind names a kind the policy reads, as a manifest names it.
type Kind struct {
	// APIVersion and Kind are the objects', such as "v1" and
	// "ServiceAccount", or "apps/v1" and "Deployment".
	APIVersion, Kind string
	// Resource is the kind's plural in the API; "" guesses it from Kind
	// (lowercase, +s, +es after s, y→ies), right for the built-in kinds.
	Resource string
	// Namespace, when set, is the one namespace read, with a Role there;
	// "" reads every namespace, with a ClusterRole.
	Namespace string
	// MaxStale is how long lookups answer after the view last heard from
	// the apiserver; 0 is defaultMaxStale (30 s).
	MaxStale time.Duration
}

func (k Kind) String() string { return k.resource().String() }

// resource is what the apiserver serves k as.
func (k Kind) resource() kubeclient.Resource {
	gv, _ := schema.ParseGroupVersion(k.APIVersion) // checkReads has checked it
	plural := k.Resource
	if plural == "" {
		guessed, _ := meta.UnsafeGuessKindToResource(gv.WithKind(k.Kind))
		plural = guessed.Resource
	}
	return kubeclient.Resource{Group: gv.Group, Version: gv.Version, Resource: plural, Namespace: k.Namespace}
}

func (k Kind) maxStale() time.Duration {
	if k.MaxStale > 0 {
		return k.MaxStale
	}
	return defaultMaxStale
}

// Read is one kind the policy reads, as ReadInto declares it: the kind,
// and how to make the view the policy holds of it.
type Read struct {
	kind    Kind
	indexes []string // the names of its indexes
	// makeView makes a new view of the kind, as current as health says
	// and asking apiserver for what it cannot answer alone (nil:
	// nothing), sets the policy's field to it and returns it.
	makeView func(health func() kubeclient.Health, apiserver *apiserverReads) viewStore
}

// viewStore is a view of any T, as the plumbing keeps it in step.
type viewStore interface {
	kubeclient.Store
	size() int
}

// ReadInto declares that the policy reads kind, keeping of each object
// what T holds, and gives the policy its view in *field, with the indexes
// IndexBy defines. policy.Reads returns one for each kind.
func ReadInto[T any](field **View[T], kind Kind, indexes ...Index[T]) Read {
	names := make([]string, len(indexes))
	for i, x := range indexes {
		names[i] = x.name
	}
	return Read{kind: kind, indexes: names, makeView: func(health func() kubeclient.Health, apiserver *apiserverReads) viewStore {
		v := newView(kind, indexes, health, apiserver)
		*field = v
		return v
	}}
}

// checkReads checks what the policy reads, as the server starts: each kind
// named as a manifest names it, read once, each index named once. A
// mistake stops the server, naming the kind.
func checkReads(reads []Read) error {
	var errs []error
	seen := map[Kind]bool{}
	for _, r := range reads {
		k := r.kind
		key := Kind{APIVersion: k.APIVersion, Kind: k.Kind, Namespace: k.Namespace}
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("policy.go: reads %s %s: "+format, append([]any{k.APIVersion, k.Kind}, args...)...))
		}
		if _, err := schema.ParseGroupVersion(k.APIVersion); err != nil || k.APIVersion == "" {
			fail("the apiVersion is not group/version or v1, such as apps/v1")
		}
		if k.Kind == "" || strings.ToUpper(k.Kind[:1]) != k.Kind[:1] {
			fail("the kind is not as a manifest names it, such as ServiceAccount")
		}
		if k.Namespace != "" && len(validation.IsDNS1123Label(k.Namespace)) > 0 {
			fail("namespace %q is not a namespace's name", k.Namespace)
		}
		if k.MaxStale < 0 {
			fail("MaxStale %s is negative", k.MaxStale)
		}
		if seen[key] {
			fail("it is read twice")
		}
		seen[key] = true
		for i, name := range r.indexes {
			if name == "" || slices.Contains(r.indexes[:i], name) {
				fail("index %q is empty or named twice", name)
			}
		}
	}
	return errors.Join(errs...)
}

// clusterFlags are the server's flags for reading the cluster.
type clusterFlags struct {
	// kubeconfig is the credentials for what the policy reads of the
	// cluster; empty: the Pod's ServiceAccount's, if it reads anything.
	kubeconfig string
	// lookupsPerSecond is the most lookups a second that reach the
	// apiserver itself (apiserverReads).
	lookupsPerSecond float64
}

// defaultLookupsPerSecond is the default of -apiserver-lookups-per-second:
// kube-controller-manager's and kube-scheduler's --kube-api-qps, enough
// for the misses of `kubectl apply -f dir/` and the reads as of now of a
// policy that asks them for a kind of request, not for every review.
const defaultLookupsPerSecond = 20

// maxLookupsPerSecond bounds -apiserver-lookups-per-second: far beyond
// what an apiserver serves, so that a value above it is a typo.
const maxLookupsPerSecond = 1e6

// latestListPage is the page of a list as of now: client-go's pager's
// (k8s.io/client-go/tools/pager, defaultPageSize).
const latestListPage = 500

// register defines the flags in flags.
func (f *clusterFlags) register(flags *flag.FlagSet) {
	flags.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig `file` whose current context's credentials read what the policy reads of the cluster (webhook reads); default: the Pod's ServiceAccount's. Unused by a policy that reads nothing")
	f.lookupsPerSecond = defaultLookupsPerSecond
	flags.Func("apiserver-lookups-per-second", fmt.Sprintf("the most of the policy's lookups a second, over every kind, that ask the apiserver itself (a view's miss, a read as of now), one second's worth at once; over it a lookup answers undecided and failurePolicy decides; 0: none (default %d)", defaultLookupsPerSecond), func(s string) error {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n < 0 || n != n || n > maxLookupsPerSecond {
			return fmt.Errorf("want a number of lookups a second, 0 or more, such as %d", defaultLookupsPerSecond)
		}
		f.lookupsPerSecond = n
		return nil
	})
}

// ErrOverRate is a lookup that would have asked the apiserver itself, not
// sent: the webhook's rate of those (-apiserver-lookups-per-second) is
// spent. The policy answers undecided, and failurePolicy decides.
var ErrOverRate = errors.New("over the webhook's rate of lookups that ask the apiserver (-apiserver-lookups-per-second)")

// apiserverReads is a view's door to the apiserver itself, for the
// lookups the view cannot answer alone, and what they cost: the requests
// sent, the lookups that shared another's, and those refused over the
// rate, which every view's share.
type apiserverReads struct {
	// get GETs the object name in namespace; list lists namespace (""
	// for every one) as of now, handing over each object's JSON, and
	// asking nextPage before each page after the first.
	get  func(ctx context.Context, namespace, name string) ([]byte, error)
	list func(ctx context.Context, namespace string, nextPage func() error, each func([]byte) error) error
	rate *lookupRate

	// counts of each verb, get and list: what was sent, shared, refused
	counts map[string]*lookupCounts
}

type lookupCounts struct{ sent, shared, refused atomic.Int64 }

func newAPIServerReads(rate *lookupRate, get func(context.Context, string, string) ([]byte, error), list func(context.Context, string, func() error, func([]byte) error) error) *apiserverReads {
	return &apiserverReads{get: get, list: list, rate: rate, counts: map[string]*lookupCounts{"get": {}, "list": {}}}
}

// take is a lookup's request of verb about to be sent: ErrOverRate when
// the rate is spent, else counted as sent.
func (a *apiserverReads) take(verb string) error {
	if !a.rate.allow(time.Now()) {
		a.counts[verb].refused.Add(1)
		return ErrOverRate
	}
	a.counts[verb].sent.Add(1)
	return nil
}

// nextPage is a list's next page about to be sent: charged to the rate
// even past it, so that a list of many pages is not thrown away partway,
// and the lookups after it are refused until the rate has made up for it.
func (a *apiserverReads) nextPage() error {
	a.rate.charge(time.Now())
	return nil
}

// shared counts a lookup of verb answered by another's request.
func (a *apiserverReads) shared(verb string, shared bool) {
	if shared {
		a.counts[verb].shared.Add(1)
	}
}

// lookupRate is a token bucket: perSecond tokens a second, holding one
// second's worth (at least one), full at the start.
type lookupRate struct {
	mu        sync.Mutex
	perSecond float64
	tokens    float64
	last      time.Time
}

func newLookupRate(perSecond float64, now time.Time) *lookupRate {
	return &lookupRate{perSecond: perSecond, tokens: max(perSecond, 1), last: now}
}

// allow takes a token, if there is one at now.
func (r *lookupRate) allow(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.perSecond <= 0 {
		return false
	}
	r.refill(now)
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}

// charge takes a token at now, one or not: the bucket may go below none.
func (r *lookupRate) charge(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill(now)
	r.tokens--
}

func (r *lookupRate) refill(now time.Time) {
	r.tokens = min(max(r.perSecond, 1), r.tokens+now.Sub(r.last).Seconds()*r.perSecond)
	r.last = now
}

// clusterViews are the views the server keeps in step with the apiserver:
// nil when the policy reads nothing.
type clusterViews struct {
	views  []watchedView
	client *kubeclient.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type watchedView struct {
	kind      Kind
	reflector *kubeclient.Reflector
	store     viewStore
	apiserver *apiserverReads
}

// watchCluster gives the policy a view of each kind it reads (reads, from
// policy.Reads), each kept in step with the apiserver by a Reflector that
// runs until stop, and returns them; nil, with no credentials asked for,
// when it reads nothing. The credentials are -kubeconfig's when it is set,
// else the Pod's ServiceAccount's; none of either stops the server, saying
// which kinds need them.
func watchCluster(reads []Read, flags clusterFlags, getenv func(string) string, logger *slog.Logger) (*clusterViews, error) {
	if err := checkReads(reads); err != nil {
		return nil, err
	}
	if len(reads) == 0 {
		if flags.kubeconfig != "" {
			logger.Info("the policy reads nothing of the cluster: -kubeconfig is not used")
		}
		return nil, nil
	}
	var cfg *kubeclient.Config
	var err error
	if flags.kubeconfig != "" {
		if cfg, err = kubeclient.LoadKubeconfig(flags.kubeconfig); err != nil {
			return nil, fmt.Errorf("-kubeconfig: %w", err)
		}
	} else if cfg, err = kubeclient.InCluster(getenv); err != nil {
		return nil, fmt.Errorf("the policy reads %s of the cluster: give -kubeconfig FILE, or run the webhook in a Pod with its ServiceAccount's token (deploy/render.sh in-cluster): %w", describeReads(reads), err)
	}
	client, err := kubeclient.New(cfg, "webhook")
	if err != nil {
		return nil, err
	}
	logger.Info("reading the cluster", "kinds", describeReads(reads), "credentials", cfg.Source, "server", cfg.Server, "apiserver_lookups_per_second", flags.lookupsPerSecond)
	ctx, cancel := context.WithCancel(context.Background())
	c := &clusterViews{client: client, cancel: cancel}
	rate := newLookupRate(flags.lookupsPerSecond, time.Now())
	for _, r := range reads {
		resource := r.kind.resource()
		var reflector *kubeclient.Reflector
		apiserver := newAPIServerReads(rate, func(ctx context.Context, namespace, name string) ([]byte, error) {
			return client.Get(ctx, resource, namespace, name)
		}, func(ctx context.Context, namespace string, nextPage func() error, each func([]byte) error) error {
			in := resource
			in.Namespace = namespace
			// No resourceVersion: as of now, a consistent read.
			_, err := client.List(ctx, in, kubeclient.ListOptions{Limit: latestListPage, NextPage: nextPage}, each)
			return err
		})
		store := r.makeView(func() kubeclient.Health { return reflector.Health() }, apiserver)
		reflector = kubeclient.NewReflector(client, resource, store, logger)
		c.views = append(c.views, watchedView{kind: r.kind, reflector: reflector, store: store, apiserver: apiserver})
		c.wg.Go(func() { reflector.Run(ctx) })
	}
	return c, nil
}

// stop stops keeping the views in step, and returns once every goroutine
// that did has ended and the client's idle connections are closed: run
// returns with nothing of them left running. A nil c has nothing to stop.
func (c *clusterViews) stop() {
	if c == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
	c.client.CloseIdleConnections()
}

// notSynced says which view has not yet synced, or returns nil once every
// one has: the webhook is ready to serve (/ping) once it can decide. A nil
// c, a policy that reads nothing, is always ready.
func (c *clusterViews) notSynced() error {
	if c == nil {
		return nil
	}
	for _, v := range c.views {
		if h := v.reflector.Health(); !h.Synced {
			if h.Err != nil {
				return fmt.Errorf("the view of %s has not synced: %v", v.kind, h.Err)
			}
			return fmt.Errorf("the view of %s has not synced yet", v.kind)
		}
	}
	return nil
}

// writeMetrics writes the views' series: what each holds, how current it
// is, the requests it sent to keep in step (the load on the apiserver),
// and the policy's lookups that asked the apiserver itself.
func (c *clusterViews) writeMetrics(w io.Writer) {
	if c == nil {
		return
	}
	family, sample := promtext.Family, promtext.Sample
	label := func(v watchedView) string {
		return promtext.LabelPairs([]string{"resource"}, []string{v.kind.String()})
	}
	family(w, "webhook_view_objects", "gauge", "Objects in the policy's view of each kind it reads.")
	for _, v := range c.views {
		sample(w, "webhook_view_objects", label(v), float64(v.store.size()))
	}
	family(w, "webhook_view_synced", "gauge", "1 once the view of a kind has listed it whole, else 0.")
	family(w, "webhook_view_current", "gauge", "1 while the view of a kind is as current as the apiserver's watch (its watch established), else 0.")
	family(w, "webhook_view_age_seconds", "gauge", "How far behind the apiserver the view of a kind may be: 0 while it is current, else the seconds since it last heard from the apiserver. Lookups fail as too stale past MaxStale.")
	family(w, "webhook_view_list_requests_total", "counter", "List requests the view of a kind sent to the apiserver, whatever their answer: one at start, one after a watch failed or its resourceVersion was no longer served.")
	family(w, "webhook_view_watch_requests_total", "counter", "Watch requests the view of a kind sent to the apiserver, whatever their answer: one every 5 to 10 minutes when all is well.")
	family(w, "webhook_view_failures_total", "counter", "Lists and watches of a kind that failed, or watches that ended within a second having sent nothing; each is followed by a backoff.")
	now := time.Now()
	for _, v := range c.views {
		h := v.reflector.Health()
		sample(w, "webhook_view_synced", label(v), boolValue(h.Synced))
		sample(w, "webhook_view_current", label(v), boolValue(h.Current))
		sample(w, "webhook_view_age_seconds", label(v), h.Age(now).Seconds())
		sample(w, "webhook_view_list_requests_total", label(v), float64(h.Lists))
		sample(w, "webhook_view_watch_requests_total", label(v), float64(h.Watches))
		sample(w, "webhook_view_failures_total", label(v), float64(h.Failures))
	}
	family(w, "webhook_view_apiserver_lookups_total", "counter", "The policy's lookups that asked the apiserver itself (a miss of GetOrFetch, GetLatest: get; ListLatest, IndexedLatest: list), by outcome: sent a request, shared a request another lookup sent, or refused over -apiserver-lookups-per-second.")
	for _, v := range c.views {
		for _, verb := range []string{"get", "list"} {
			n := v.apiserver.counts[verb]
			for _, o := range []struct {
				outcome string
				count   int64
			}{{"sent", n.sent.Load()}, {"shared", n.shared.Load()}, {"refused", n.refused.Load()}} {
				sample(w, "webhook_view_apiserver_lookups_total", promtext.LabelPairs([]string{"resource", "verb", "outcome"}, []string{v.kind.String(), verb, o.outcome}), float64(o.count))
			}
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// describeReads names the kinds reads reads, for messages.
func describeReads(reads []Read) string {
	names := make([]string, len(reads))
	for i, r := range reads {
		names[i] = r.kind.String()
	}
	return strings.Join(names, ", ")
}

// clusterObject is an object read from a file, for fillViews.
type clusterObject struct {
	source string // the file and the item, for messages
	raw    json.RawMessage
	typeMeta
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// readClusterObjects reads the objects of a file: YAML or JSON, several
// documents, Lists (as `kubectl get KIND -A -o json` prints them, or the
// apiserver lists them, a ServiceAccountList whose items have no kind)
// taken apart. Each must have an apiVersion and a kind; an error names the
// file and the document or item.
func readClusterObjects(path string, r io.Reader) ([]clusterObject, error) {
	var out []clusterObject
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, doc, err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var list struct {
			typeMeta
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("%s: document %d is not an object: %w", path, doc, err)
		}
		items, where := []json.RawMessage{raw}, fmt.Sprintf("%s: document %d", path, doc)
		if strings.HasSuffix(list.Kind, "List") {
			items = list.Items
		}
		for i, item := range items {
			o := clusterObject{source: where, raw: item}
			if len(items) > 1 || strings.HasSuffix(list.Kind, "List") {
				o.source = fmt.Sprintf("%s, item %d", where, i+1)
			}
			if err := json.Unmarshal(item, &o.typeMeta); err != nil {
				return nil, fmt.Errorf("%s is not an object: %w", o.source, err)
			}
			if o.Kind == "" && list.Kind != "List" && strings.HasSuffix(list.Kind, "List") {
				// The apiserver's own list, a ServiceAccountList, leaves
				// them out of its items.
				o.APIVersion, o.Kind = list.APIVersion, strings.TrimSuffix(list.Kind, "List")
			}
			if o.APIVersion == "" || o.Kind == "" {
				return nil, fmt.Errorf("%s has no apiVersion and kind", o.source)
			}
			out = append(out, o)
		}
	}
}

// fillViews gives the policy a view of each kind it reads (reads, from
// policy.Reads), filled once with the objects of that kind (and namespace)
// among objects, a kind absent from them being empty: the door a test
// uses, and `webhook review -cluster`. A view whose objects do not decode
// into what the policy keeps is not synced, and says why, as the server's
// would be; the error returned says so too, naming the object.
func fillViews(reads []Read, objects []clusterObject) error {
	if err := checkReads(reads); err != nil {
		return err
	}
	var errs []error
	for _, r := range reads {
		var failed error
		health := func() kubeclient.Health {
			if failed != nil {
				return kubeclient.Health{Err: failed}
			}
			return kubeclient.Health{Synced: true, Current: true}
		}
		store := r.makeView(health, nil)
		failed = store.Replace(func(add func([]byte) error) error {
			for _, o := range objects {
				if o.APIVersion == r.kind.APIVersion && o.Kind == r.kind.Kind {
					if err := add(o.raw); err != nil {
						return fmt.Errorf("%s: %w", o.source, err)
					}
				}
			}
			return nil
		})
		if failed != nil {
			errs = append(errs, failed)
		}
	}
	return errors.Join(errs...)
}

// clusterFiles is `webhook review -cluster`: files of the objects the
// policy reads, each read as the flag is given.
type clusterFiles struct {
	objects []clusterObject
	given   bool
}

func (f *clusterFiles) String() string { return "" }

func (f *clusterFiles) Set(path string) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	objects, err := readClusterObjects(path, file)
	if err != nil {
		return err
	}
	f.objects, f.given = append(f.objects, objects...), true
	return nil
}

// runReads is `webhook reads`: what the policy reads of the cluster
// (reads, from the policy with its defaults), as a table, as JSON, or as the RBAC that lets the webhook's ServiceAccount get,
// list and watch exactly that (-o rbac, which deploy/render.sh renders).
// For a policy that reads nothing it prints nothing.
func runReads(args []string, reads []Read, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("webhook reads", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(stderr, `usage: webhook reads [-o text|json|rbac] [-service-account NAMESPACE/NAME]

The kinds the policy reads of the cluster (its Reads method), and with
-o rbac the RBAC that lets the webhook's ServiceAccount get, list and watch
exactly them, which deploy/render.sh renders (docs/cluster.md).

Exit status: 0, or 2 for bad usage.

`)
		flags.PrintDefaults()
	}
	output := flags.String("o", "text", "output `format`: text, json, or rbac (the ClusterRole, Roles and their bindings, as YAML)")
	account := flags.String("service-account", "webhook-system/webhook", "with -o rbac: the `namespace/name` of the ServiceAccount the webhook runs as")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if flags.NArg() > 0 {
		return usageError{fmt.Errorf("reads: unexpected argument %q", flags.Arg(0))}
	}
	if err := checkReads(reads); err != nil {
		return err
	}
	switch *output {
	case "text":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, r := range reads {
			res, where := r.kind.resource(), "every namespace"
			if r.kind.Namespace != "" {
				where = "namespace " + r.kind.Namespace
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.kind.APIVersion, r.kind.Kind, res.Resource, where)
		}
		return tw.Flush()
	case "json":
		type kindJSON struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Resource   string `json:"resource"`
			Namespace  string `json:"namespace,omitempty"`
		}
		out := []kindJSON{}
		for _, r := range reads {
			out = append(out, kindJSON{r.kind.APIVersion, r.kind.Kind, r.kind.resource().Resource, r.kind.Namespace})
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	case "rbac":
		namespace, name, ok := strings.Cut(*account, "/")
		if !ok || namespace == "" || name == "" {
			return usageError{fmt.Errorf("-service-account %q: want namespace/name, such as webhook-system/webhook", *account)}
		}
		_, err := io.WriteString(stdout, renderRBAC(reads, namespace, name))
		return err
	default:
		return usageError{fmt.Errorf("-o %q: want text, json or rbac", *output)}
	}
}

// renderRBAC is the RBAC that lets the ServiceAccount namespace/name get,
// list and watch exactly what reads names: a ClusterRole for the kinds of
// every namespace, a Role in each namespace read alone, and their
// bindings; "" when it reads nothing. get is for a view's miss (view.get),
// list and watch for the Reflector.
func renderRBAC(reads []Read, namespace, name string) string {
	if len(reads) == 0 {
		return ""
	}
	byNamespace := map[string][]kubeclient.Resource{}
	var namespaces []string
	for _, r := range reads {
		res := r.kind.resource()
		if _, ok := byNamespace[res.Namespace]; !ok {
			namespaces = append(namespaces, res.Namespace)
		}
		byNamespace[res.Namespace] = append(byNamespace[res.Namespace], res)
	}
	slices.Sort(namespaces)
	var b strings.Builder
	b.WriteString("# What the policy reads of the cluster (policy.go, Reads), and nothing else:\n" +
		"# get, list and watch. Rendered by `webhook reads -o rbac`; change policy.go,\n" +
		"# not this file.\n")
	// Named after the account, so that two webhooks' never meet.
	roleName := name + "-reads"
	for _, ns := range namespaces {
		role, binding, meta := "ClusterRole", "ClusterRoleBinding", fmt.Sprintf("  name: %s\n", roleName)
		if ns != "" {
			role, binding, meta = "Role", "RoleBinding", fmt.Sprintf("  name: %s\n  namespace: %s\n", roleName, ns)
		}
		fmt.Fprintf(&b, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: %s\nmetadata:\n%srules:\n", role, meta)
		for _, res := range byNamespace[ns] {
			fmt.Fprintf(&b, "- apiGroups: [%q]\n  resources: [%q]\n  verbs: [\"get\", \"list\", \"watch\"]\n", res.Group, res.Resource)
		}
		fmt.Fprintf(&b, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: %s\nmetadata:\n%sroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: %s\n  name: %s\nsubjects:\n- kind: ServiceAccount\n  name: %s\n  namespace: %s\n",
			binding, meta, role, roleName, name, namespace)
	}
	return b.String()
}

// offlineViews gives the policy, for `webhook review`, views of what it
// reads (reads) filled from the files of -cluster, or, without any, views
// that are never synced and say to give them: a lookup then answers
// undecided, with that message, rather than decide as if the cluster held
// nothing.
func offlineViews(reads []Read, files clusterFiles) error {
	if files.given {
		return fillViews(reads, files.objects)
	}
	if len(reads) == 0 {
		return nil
	}
	missing := fmt.Errorf("webhook review has no view of the cluster: give -cluster FILE, such as the output of kubectl get %s -A -o json", reads[0].kind.resource().Resource)
	for _, r := range reads {
		r.makeView(func() kubeclient.Health { return kubeclient.Health{Err: missing} }, nil)
	}
	return nil
}

// usageError is a command line `webhook reads` cannot run with: main.go
// exits 2, as for every command's.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
func (e usageError) ExitCode() int { return 2 }
