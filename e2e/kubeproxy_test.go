package e2e

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"
)

// kubeProxy stands in for kube-proxy on one port of a Service's ClusterIP,
// as the apiserver meets it when it calls a webhook registered by service:
// the apiserver resolves the Service to its ClusterIP and port
// (k8s.io/apiserver v0.37.2, pkg/util/proxy ResolveCluster), and dials
// that; kube-proxy's rules on the node then choose a Pod. Like kube-proxy
// in its iptables and nftables modes:
//   - each new connection goes to one endpoint it knows as ready, chosen
//     at random;
//   - a connection keeps its endpoint until it closes, after that endpoint
//     has left the Service (conntrack);
//   - it learns each change of the endpoints delay after it is made (the
//     EndpointSlice controller, then kube-proxy's own sync);
//   - a connection that finds no endpoint, or one whose endpoint refuses
//     it, is reset, as iptables' REJECT and a closed port reset it.
//
// It passes bytes through, so the apiserver's TLS reaches the replica as it
// would through NAT; unlike NAT, the replica sees every connection come
// from this process's address.
type kubeProxy struct {
	ln    net.Listener
	delay time.Duration

	mu        sync.Mutex
	endpoints []string       // what it sends new connections to: the Service's, delay ago
	changes   int            // endpoint changes made
	applied   int            // the latest change it has learned
	opened    map[string]int // connections it opened, by endpoint
	active    map[string]int // of those, the ones open now
	reset     int            // connections it reset: no endpoint, or the endpoint refused
	open      map[net.Conn]bool
	closed    bool
	wg        sync.WaitGroup
}

// proxyDialTimeout bounds a dial to an endpoint: on loopback a listening
// port answers at once and a closed one refuses at once.
const proxyDialTimeout = 2 * time.Second

// startKubeProxy listens on addr and forwards each connection to one of
// endpoints, and later to the endpoints set names, delay after it names
// them.
func startKubeProxy(addr string, delay time.Duration, endpoints []string) (*kubeProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &kubeProxy{ln: ln, delay: delay, endpoints: slices.Clone(endpoints), opened: map[string]int{}, active: map[string]int{}, open: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.acceptAll()
	return p, nil
}

// set makes endpoints the Service's ready endpoints, as the EndpointSlice
// controller does when a Pod becomes ready or starts terminating; new
// connections go by them delay later.
func (p *kubeProxy) set(endpoints ...string) {
	p.mu.Lock()
	p.changes++
	change := p.changes
	p.mu.Unlock()
	endpoints = slices.Clone(endpoints)
	time.AfterFunc(p.delay, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if change > p.applied { // changes apply in the order they were made
			p.endpoints, p.applied = endpoints, change
		}
	})
}

// setNow makes endpoints the ones it sends new connections to at once, as
// it finds them when it starts.
func (p *kubeProxy) setNow(endpoints ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	p.endpoints, p.applied = slices.Clone(endpoints), p.changes
}

// counts returns how many connections it has opened to each endpoint, and
// how many it has reset.
func (p *kubeProxy) counts() (opened map[string]int, reset int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	opened = map[string]int{}
	for e, n := range p.opened {
		opened[e] = n
	}
	return opened, p.reset
}

// openTo returns how many connections to endpoint are open now.
func (p *kubeProxy) openTo(endpoint string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active[endpoint]
}

// Close stops listening and closes every connection it forwards.
func (p *kubeProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *kubeProxy) acceptAll() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

// forward sends client's connection to an endpoint, for as long as both
// ends keep it open.
func (p *kubeProxy) forward(client net.Conn) {
	p.mu.Lock()
	endpoint := ""
	if len(p.endpoints) > 0 {
		endpoint = p.endpoints[rand.IntN(len(p.endpoints))]
	}
	p.mu.Unlock()
	var backend net.Conn
	if endpoint != "" {
		backend, _ = net.DialTimeout("tcp", endpoint, proxyDialTimeout)
	}
	p.mu.Lock()
	if backend == nil || p.closed {
		p.reset++
		p.mu.Unlock()
		resetConn(client)
		if backend != nil {
			backend.Close()
		}
		return
	}
	p.opened[endpoint]++
	p.active[endpoint]++
	p.open[client], p.open[backend] = true, true
	p.mu.Unlock()

	splice(client, backend)

	p.mu.Lock()
	p.active[endpoint]--
	delete(p.open, client)
	delete(p.open, backend)
	p.mu.Unlock()
}

// splice copies bytes both ways between a and b, passing each end's close
// on to the other (a FIN, or a reset as a reset), and returns when both
// ways are done.
func splice(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		pass(a, b)
		close(done)
	}()
	pass(b, a)
	<-done
	a.Close()
	b.Close()
}

// pass copies from src to dst until src ends. A clean end (FIN) is passed
// on as one, after what came before it; an error, such as a reset, resets
// dst, so that neither side waits on the other.
func pass(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		resetConn(dst)
		src.Close()
		return
	}
	if tcp, ok := dst.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}

// resetConn closes c with a reset rather than a FIN, as a connection
// refused or rejected by kube-proxy's rules ends for the client.
func resetConn(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	c.Close()
}
