// Package limits holds the generic machinery the webhook's server uses to
// bound what clients can make it hold: a listener that caps the
// connections open (Listener), a first-come-first-served weighted
// semaphore (Budget), and a body reader held to a stall timeout and a
// floor rate (BodyClock). It knows nothing of webhooks: the root package
// says how many connections, how long the graces, how many bytes and how
// slow a body, and why.
package limits

import (
	"container/list"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"
)

// Listener keeps at most max connections open. At the cap it makes room
// by closing a connection that is not serving a request and has had its
// chance:
//
//  1. one that has not sent a complete request header freshGrace after it
//     was accepted, the oldest first: a client such as the apiserver sends
//     its headers within milliseconds of connecting, so this is a client
//     that dribbles them (or sends nothing) to hold a place;
//  2. one idle for longer than idleGrace, the one idle the longest first,
//     as nginx closes kept-alive connections at its worker_connections
//     limit: Go's client, the apiserver's, reuses its most recently used
//     idle connection first, so the connections idle the longest are
//     those it has stopped using, or a client's that sent one request and
//     holds on.
//
// A request being served is never cut, nor, as a rule, a connection that
// is new or was used a moment ago: its client may be sending on it right
// now, and a request written into a connection as it closes fails.
//
// The exception is a fair share by client address, as nginx's limit_conn
// keys on $binary_remote_addr: the apiserver, the kubelet and a hostile Pod
// connect from different addresses, and a flood from one address must not
// shut the others out however fast it reconnects. So when nothing has had
// its chance yet, a newcomer whose address holds at least two connections
// fewer than the address holding the most takes the place of one of that
// address's connections that is not serving: the one idle the longest, or
// else the oldest without a complete header. Behind a proxy that gives
// every client one address, the share is moot and the rules above decide.
//
// Otherwise, when the listener is full of connections still within their
// grace, the newcomer is closed at once, before its handshake ("refused"):
// left to wait, it would queue in the kernel's backlog behind everything a
// flood of connections has queued there, and the kubelet's probe would time
// out; closed, the backlog stays short, and the next newcomer finds a
// connection to close as soon as one's grace is over. Only when every
// connection is serving a request does the newcomer wait, in the backlog:
// that is load, not a flood, and a request finishes in milliseconds.
//
// The listener learns each connection's state from http.Server.ConnState,
// which must be set to its ConnState method.
type Listener struct {
	net.Listener
	max                   int
	freshGrace, idleGrace time.Duration
	closed                func(reason string)

	mu       sync.Mutex
	open     int                // connections open
	bySource map[netip.Addr]int // connections open, by client address
	fresh    list.List          // of *limitedConn: no complete request header yet, oldest first
	idle     list.List          // of *limitedConn: between requests, longest idle first
	freed    chan struct{}      // a place was given back, or a connection can be closed
	done     chan struct{}      // closed with the listener
	once     sync.Once
}

// limitedConn is a connection the limiter holds a place for.
type limitedConn struct {
	net.Conn
	limiter *Listener
	// in and elem are where it waits while it may be closed at the cap
	// (limiter.fresh or limiter.idle); nil while it serves a request.
	in       *list.List
	elem     *list.Element
	source   netip.Addr // the client's address, for the fair share
	since    time.Time  // when it was accepted, or last went idle
	released bool       // its place is given back; under limiter.mu
}

// NewListener returns ln holding at most max connections, sparing at the
// cap one that is fresh for freshGrace and one idle for idleGrace.
// closed, when not nil, is called for each connection the listener closes
// before it sent a complete request: reason is "capacity" for one closed
// to make room, "refused" for a newcomer closed at once, "header_timeout"
// for one that net/http's ReadHeaderTimeout closed.
func NewListener(ln net.Listener, max int, freshGrace, idleGrace time.Duration, closed func(reason string)) *Listener {
	if closed == nil {
		closed = func(string) {}
	}
	return &Listener{Listener: ln, max: max, freshGrace: freshGrace, idleGrace: idleGrace, closed: closed,
		bySource: map[netip.Addr]int{}, freed: make(chan struct{}, 1), done: make(chan struct{})}
}

// Accept accepts the next connection once there is room for it, closing
// a connection that is not serving if the listener is full, or refusing
// the newcomer (see Listener).
func (l *Listener) Accept() (net.Conn, error) {
	for {
		// Wait before accepting, so that a client there is no room for
		// waits in the kernel's backlog rather than in this process.
		if err := l.waitForRoom(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, err := l.admit(c)
		if err != nil {
			return nil, err
		}
		if lc != nil {
			return lc, nil
		}
	}
}

// admit gives c a place, closing another connection to make one, or
// refuses it (nil, nil). Only now that a connection has come is one closed
// for it: net/http calls Accept again as soon as it has one, long before
// the next arrives. In between, the one that was there to close may have
// begun a request; then c waits, unserved, like one in the backlog.
func (l *Listener) admit(c net.Conn) (*limitedConn, error) {
	source := sourceOf(c)
	var victim *limitedConn
	for waited := false; ; waited = true {
		l.mu.Lock()
		if l.open < l.max {
			break
		}
		var wait time.Duration
		if victim, wait = l.victimLocked(); victim == nil {
			victim = l.fairShareVictimLocked(source)
		}
		if victim != nil {
			victim.releaseLocked()
			break
		}
		unused := l.fresh.Len() + l.idle.Len()
		l.mu.Unlock()
		// A newcomer that came when every connection was serving waits
		// its turn, even once one of them is between requests.
		if unused > 0 && !waited {
			l.closed("refused") // before the close, which the client sees
			c.Close()
			return nil, nil
		}
		if err := l.waitFor(wait); err != nil {
			c.Close()
			return nil, err
		}
	}
	lc := &limitedConn{Conn: c, limiter: l, source: source, since: time.Now()}
	l.open++
	l.bySource[source]++
	lc.in, lc.elem = &l.fresh, l.fresh.PushBack(lc)
	l.mu.Unlock()
	if victim != nil {
		// The raw connection, without TLS's close_notify, which could
		// block on a client that does not read.
		l.closed("capacity")
		victim.Conn.Close()
	}
	return lc, nil
}

// victimLocked returns the connection to close at the cap, or nil and how
// long until one may qualify. Of those past their grace in a list, it
// takes the oldest of the address holding the most connections, else the
// oldest: a flood's, not the apiserver's new connection that the flood's
// handshakes have kept from sending its header in time.
func (l *Listener) victimLocked() (*limitedConn, time.Duration) {
	var heaviest netip.Addr
	most := 0
	for source, n := range l.bySource {
		if n > most {
			heaviest, most = source, n
		}
	}
	wait := l.idleGrace
	for _, q := range []struct {
		list  *list.List
		grace time.Duration
	}{{&l.fresh, l.freshGrace}, {&l.idle, l.idleGrace}} {
		var oldest *limitedConn
		for e := q.list.Front(); e != nil; e = e.Next() {
			c := e.Value.(*limitedConn)
			waited := time.Since(c.since)
			if waited < q.grace {
				if oldest == nil {
					wait = min(wait, q.grace-waited)
				}
				break
			}
			if c.source == heaviest {
				return c, 0
			}
			if oldest == nil {
				oldest = c
			}
		}
		if oldest != nil {
			return oldest, 0
		}
	}
	return nil, wait
}

// fairShareVictimLocked returns the connection to close, within its grace,
// for a newcomer from source: one not serving of the address holding the
// most connections, if source holds at least two fewer (see Listener). It
// runs only at the cap with nothing past its grace, and looks at no more
// than max connections.
func (l *Listener) fairShareVictimLocked(source netip.Addr) *limitedConn {
	var heaviest netip.Addr
	most := 0
	for _, q := range []*list.List{&l.idle, &l.fresh} {
		for e := q.Front(); e != nil; e = e.Next() {
			if c := e.Value.(*limitedConn); l.bySource[c.source] > most {
				heaviest, most = c.source, l.bySource[c.source]
			}
		}
	}
	if most < l.bySource[source]+2 {
		return nil
	}
	// The idle first: the apiserver, when it holds the most, reuses its
	// most recently used connections and is not sending on the one idle
	// the longest; a new one of its own is about to carry a review.
	for _, q := range []*list.List{&l.idle, &l.fresh} {
		for e := q.Front(); e != nil; e = e.Next() {
			if c := e.Value.(*limitedConn); c.source == heaviest {
				return c
			}
		}
	}
	return nil
}

// sourceOf is the client's address of c; the zero Addr, one address for
// all, when c is not TCP.
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// waitForRoom returns once there is room for one more connection, or a
// connection that is not serving, to close or to refuse the next for.
func (l *Listener) waitForRoom() error {
	for {
		l.mu.Lock()
		room := l.open < l.max || l.fresh.Len()+l.idle.Len() > 0
		l.mu.Unlock()
		if room {
			return nil
		}
		if err := l.waitFor(l.idleGrace); err != nil {
			return err
		}
	}
}

// waitFor waits for a connection to close or to go idle, or for d.
func (l *Listener) waitFor(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.freed:
	case <-t.C:
	case <-l.done:
		return net.ErrClosed
	}
	return nil
}

func (l *Listener) signalFreed() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// Close closes the listener and wakes an Accept waiting for room.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open returns the number of connections open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Max returns the most connections the listener holds open at once.
func (l *Listener) Max() int { return l.max }

// ConnState is the server's http.Server.ConnState: it moves a connection
// between the lists, and gives back the place of one that is closed or
// hijacked.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.released {
		return
	}
	switch state {
	case http.StateActive:
		c.unlistLocked()
	case http.StateIdle:
		c.unlistLocked()
		c.since = time.Now()
		c.in, c.elem = &l.idle, l.idle.PushBack(c)
	case http.StateHijacked, http.StateClosed:
		c.releaseLocked()
	}
}

func (c *limitedConn) unlistLocked() {
	if c.in != nil {
		c.in.Remove(c.elem)
		c.in, c.elem = nil, nil
	}
}

// releaseLocked gives the connection's place back.
func (c *limitedConn) releaseLocked() {
	if c.released {
		return
	}
	c.released = true
	c.unlistLocked()
	c.limiter.open--
	if c.limiter.bySource[c.source]--; c.limiter.bySource[c.source] == 0 {
		delete(c.limiter.bySource, c.source)
	}
	c.limiter.signalFreed()
}

// Read counts a connection closed because it had not sent a complete
// request header in time: net/http's ReadHeaderTimeout, which also bounds
// the TLS handshake, is a deadline on this connection while it is fresh.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.limiter.mu.Lock()
		fresh := c.in == &c.limiter.fresh
		c.limiter.mu.Unlock()
		if fresh {
			c.limiter.closed("header_timeout")
		}
	}
	return n, err
}

// Close gives the connection's place back and closes it.
func (c *limitedConn) Close() error {
	c.limiter.mu.Lock()
	c.releaseLocked()
	c.limiter.mu.Unlock()
	return c.Conn.Close()
}
