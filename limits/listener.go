// Package limits holds Listener, which bounds the connections a server holds
// open and never closes one to make room for another.
package limits

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	// MaxWaiting is how many newcomers may wait for a place, as Linux's
	// default somaxconn: each holds only its socket.
	MaxWaiting = 4096

	// HandshakeTimeout bounds a handshake, from its place given: the
	// longest the apiserver waits for a review, not client-go's 10 s,
	// which a server starved of CPU overruns (docs/operations.md).
	HandshakeTimeout = 30 * time.Second
)

// Listener accepts connections, does their TLS handshakes, and holds at
// most max of them open; docs/operations.md ("Hostile clients") says why.
// It guarantees:
//
//   - No connection is closed to make room for another, whatever its
//     timing: a newcomer without a place waits, holding only its socket.
//   - Places go first to the newcomers of the address holding the fewest
//     connections, each address's in the order they came, and no address
//     holds more than three quarters of them.
//   - It closes a connection only when its handshake fails or lasts
//     HandshakeTimeout ("handshake"), and when MaxWaiting wait, the newest
//     of the address with the most waiting ("shed").
//
// Accept returns each connection once its handshake is done: serve them
// with http.Server.Serve. Closing one gives its place back.
type Listener struct {
	raw        net.Listener
	tlsConfig  *tls.Config
	max        int
	perAddress int

	ready chan net.Conn // handshakes done, for Accept
	done  chan struct{}
	once  sync.Once
	err   error // why Accept stops, once done is closed

	mu      sync.Mutex
	conns   map[*conn]bool // holding a place: true once handed to Accept
	held    map[netip.Addr]int
	waiting map[netip.Addr][]*conn
	queued  int // newcomers waiting
	closed  map[string]uint64
}

// conn is a connection waiting for a place, or holding one.
type conn struct {
	net.Conn
	l      *Listener
	source netip.Addr
}

// NewListener returns a Listener of at most max connections from ln, with
// TLS by tlsConfig, or none when it is nil. It accepts from ln at once.
func NewListener(ln net.Listener, tlsConfig *tls.Config, max int) *Listener {
	l := &Listener{raw: ln, tlsConfig: tlsConfig, max: max, perAddress: max - max/4,
		ready: make(chan net.Conn), done: make(chan struct{}),
		conns: map[*conn]bool{}, held: map[netip.Addr]int{}, waiting: map[netip.Addr][]*conn{}, closed: map[string]uint64{}}
	go l.acceptAll()
	return l
}

// Accept returns the next connection given a place, its handshake done.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.raw.Addr() }

// Close stops accepting, and closes the newcomers waiting and those in
// their handshake.
func (l *Listener) Close() error {
	l.stop(net.ErrClosed)
	err := l.raw.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, handedOver := range l.conns {
		if !handedOver {
			c.Conn.Close()
		}
	}
	for _, q := range l.waiting {
		for _, c := range q {
			c.Conn.Close()
		}
	}
	clear(l.waiting)
	l.queued = 0
	return err
}

func (l *Listener) stop(err error) { l.once.Do(func() { l.err = err; close(l.done) }) }

// Stats is what a Listener holds, and has closed by reason ("shed", and
// "handshake" for one that failed or took HandshakeTimeout), for the
// metrics.
type Stats struct {
	Max, Open, Waiting int
	Closed             map[string]uint64
}

// Stats returns what l holds now, and has closed so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Max: l.max, Open: len(l.conns), Waiting: l.queued,
		Closed: map[string]uint64{"shed": l.closed["shed"], "handshake": l.closed["handshake"]}}
}

// acceptAll takes every newcomer from the kernel as it comes, and puts it
// in line; past MaxWaiting, it sheds one.
func (l *Listener) acceptAll() {
	var backoff time.Duration
	for {
		nc, err := l.raw.Accept()
		var temporary interface{ Temporary() bool }
		if errors.As(err, &temporary) && temporary.Temporary() {
			// Out of file descriptors, say: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		} else if err != nil {
			l.stop(err)
			return
		}
		backoff = 0
		l.mu.Lock()
		select {
		case <-l.done: // Close came first, and closed the line
			l.mu.Unlock()
			nc.Close()
			return
		default:
		}
		c := &conn{Conn: nc, l: l, source: sourceOf(nc)}
		l.waiting[c.source] = append(l.waiting[c.source], c)
		if l.queued++; l.queued > MaxWaiting {
			var most netip.Addr
			for addr, q := range l.waiting {
				if len(q) > len(l.waiting[most]) {
					most = addr
				}
			}
			q := l.waiting[most]
			l.setWaitingLocked(most, q[:len(q)-1])
			q[len(q)-1].Conn.Close()
			l.closed["shed"]++
		}
		l.givePlacesLocked()
		l.mu.Unlock()
	}
}

// givePlacesLocked gives the places free to waiting newcomers, each to
// the oldest newcomer of the lightest address under its share: called
// whenever a newcomer comes or a place comes free.
func (l *Listener) givePlacesLocked() {
	for len(l.conns) < l.max {
		var next netip.Addr
		found := false
		for addr := range l.waiting {
			if l.held[addr] < l.perAddress && (!found || l.held[addr] < l.held[next]) {
				next, found = addr, true
			}
		}
		if !found {
			return
		}
		q := l.waiting[next]
		c := q[0]
		l.setWaitingLocked(next, q[1:])
		l.conns[c] = false
		l.held[c.source]++
		if l.tlsConfig == nil {
			l.conns[c] = true
			go l.handOver(c, c)
		} else {
			go l.handshake(c)
		}
	}
}

// setWaitingLocked makes q source's line, one shorter than it was.
func (l *Listener) setWaitingLocked(source netip.Addr, q []*conn) {
	l.queued--
	if l.waiting[source] = q; len(q) == 0 {
		delete(l.waiting, source)
	}
}

// handshake does c's TLS handshake, and hands c to Accept.
func (l *Listener) handshake(c *conn) {
	tc := tls.Server(c, l.tlsConfig)
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	l.mu.Lock()
	select {
	case <-l.done: // Close closed it, or closes it next
		err = net.ErrClosed
	default:
		if err != nil { // failed, or timed out (tls closed c)
			l.closed["handshake"]++
		} else {
			l.conns[c] = true
		}
	}
	l.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	l.handOver(c, tc)
}

func (l *Listener) handOver(c *conn, nc net.Conn) {
	select {
	case l.ready <- nc:
	case <-l.done:
		// The raw connection: TLS's close_notify could block on a client
		// that does not read.
		c.Close()
	}
}

// sourceOf is the client's address of c; the zero Addr, one address for
// all, when c is not TCP.
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// Close gives the connection's place back and closes it.
func (c *conn) Close() error {
	l := c.l
	l.mu.Lock()
	if _, open := l.conns[c]; open {
		delete(l.conns, c)
		if l.held[c.source]--; l.held[c.source] == 0 {
			delete(l.held, c.source)
		}
		l.givePlacesLocked()
	}
	l.mu.Unlock()
	return c.Conn.Close()
}
