// Package limits holds the listener that caps the connections the
// webhook's server holds open (Listener), whatever its clients do. It
// knows nothing of webhooks: the root package says how many connections,
// how long the graces, and why.
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
	"sync/atomic"
	"time"
)

// Listener keeps at most max connections open. Below the cap it accepts
// every connection. At the cap, a newcomer takes the place of a connection
// that is not serving a request, or is closed at once, before its TLS
// handshake ("refused"); only when every connection is serving a request
// does it wait, in the kernel's backlog: that is load, not a flood, and a
// request finishes in milliseconds. A request being served is never cut.
//
// Which connection makes room follows three rules, in order. They key on
// the client's address, as nginx's limit_conn keys on $binary_remote_addr
// and HAProxy's src_conn_cur does: in a cluster the apiserver, the kubelet
// and a hostile Pod each connect from an address of their own.
//
//  1. A fair share. A newcomer whose address holds at least two
//     connections fewer than the address holding the most takes the place
//     of one of that address's connections that is not serving, within its
//     grace or not: the one idle the longest, else the oldest without a
//     complete request header. A flood from one address, however fast it
//     reconnects, cannot shut the apiserver or the kubelet out.
//  2. No rotation for a flood. A newcomer whose address already holds more
//     than half the port, while another address holds a connection, is
//     refused before its handshake. Its address is not short of
//     connections, only of unused ones it could have used; letting it in
//     would close one of its own to pay for a TLS handshake whose
//     connection will in turn be closed. The handshakes, not the
//     connections, are what a flood costs: on two cores they are what
//     pushed the apiserver's reviews towards their timeout.
//  3. Otherwise the newcomer takes the place of a connection past its
//     grace, of an address holding at least as many connections as its
//     own: never a lighter address's, such as the apiserver's new
//     connection, whose handshake a flood's may have slowed. First one
//     without a complete request header that has made the server wait
//     headerGrace for it: the apiserver and the kubelet send theirs within
//     milliseconds of connecting, so this is a client that dribbles them,
//     or sends nothing, to hold a place. Then one idle for longer than
//     idleGrace, the one idle the longest first, as nginx closes kept-alive
//     connections at its worker_connections limit: Go's client, the
//     apiserver's, reuses its most recently used idle connection first, so
//     those idle the longest are those it has stopped using, or a client's
//     that sent one request and holds on.
//
// The header grace counts only the time the server spent waiting in Read for
// the client, as package body does for bodies: a connection whose handshake
// waits for the server's CPU, taken by a flood's handshakes or a node's
// other work, has not made anyone wait. Behind a proxy that gives every
// client one address, rules 1 and 2 are moot and rule 3 decides alone.
//
// Rule 2 refuses rather than waits: left to wait, a newcomer queues in the
// kernel's backlog behind everything a flood has queued there, and the
// kubelet's probe would time out; refused, the backlog stays short.
//
// The listener learns each connection's state from http.Server.ConnState,
// which must be set to its ConnState method (net/http's HTTP/2 server
// reports a connection active while it serves a stream, and idle after).
type Listener struct {
	net.Listener
	max                    int
	headerGrace, idleGrace time.Duration
	epoch                  time.Time // connections' clocks count from it

	// Connections closed before they sent a complete request, by reason.
	closedAtCapacity, refused, headerTimeouts atomic.Uint64

	mu             sync.Mutex
	open           int                     // connections open
	bySource       map[netip.Addr]*holding // what each client address holds
	awaitingHeader list.List               // of *limitedConn: no complete request header yet, oldest first
	idle           list.List               // of *limitedConn: between requests, longest idle first
	freed          chan struct{}           // a place was given back, or a connection can be closed
	done           chan struct{}           // closed with the listener
	once           sync.Once
}

// holding is what one client address holds: its connections open, and of
// them those not serving a request (in Listener.awaitingHeader or Listener.idle).
type holding struct {
	open, unused int
}

// limitedConn is a connection the limiter holds a place for.
type limitedConn struct {
	net.Conn
	limiter *Listener
	// in and elem are where it waits while it may be closed at the cap
	// (limiter.awaitingHeader or limiter.idle); nil while it serves a request.
	in        *list.List
	elem      *list.Element
	source    netip.Addr // the client's address
	idleSince time.Time  // when it last went idle
	released  bool       // its place is given back; under limiter.mu

	// The header grace's clock, kept by Read until the first request
	// header is complete: how long the server has waited in Read
	// for this client, and when the Read waiting now began (since the
	// limiter's epoch; 0 when none is). Read by Accept's goroutine.
	headerComplete atomic.Bool
	waited         atomic.Int64 // time.Duration
	readingSince   atomic.Int64 // time.Duration since epoch
}

// NewListener returns ln holding at most max connections, sparing at the
// cap one that has made the server wait less than headerGrace for its first
// request header, and one idle for less than idleGrace.
func NewListener(ln net.Listener, max int, headerGrace, idleGrace time.Duration) *Listener {
	return &Listener{Listener: ln, max: max, headerGrace: headerGrace, idleGrace: idleGrace, epoch: time.Now(),
		bySource: map[netip.Addr]*holding{}, freed: make(chan struct{}, 1), done: make(chan struct{})}
}

// Closed returns how many connections the listener has closed before they
// sent a complete request, by reason: "capacity" for one closed to make
// room, "refused" for a newcomer closed at once, "header_timeout" for one
// that net/http's ReadHeaderTimeout closed.
func (l *Listener) Closed() map[string]uint64 {
	return map[string]uint64{"capacity": l.closedAtCapacity.Load(), "refused": l.refused.Load(), "header_timeout": l.headerTimeouts.Load()}
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
		var refuse bool
		var wait time.Duration
		if victim, refuse, wait = l.victimLocked(source); victim != nil {
			victim.releaseLocked()
			break
		}
		unused := l.awaitingHeader.Len() + l.idle.Len()
		l.mu.Unlock()
		// A newcomer that came when every connection was serving waits
		// its turn, even once one of them is between requests.
		if refuse || (unused > 0 && !waited) {
			l.refused.Add(1) // before the close, which the client sees
			c.Close()
			return nil, nil
		}
		if err := l.waitFor(wait); err != nil {
			c.Close()
			return nil, err
		}
	}
	lc := &limitedConn{Conn: c, limiter: l, source: source}
	l.open++
	h := l.bySource[source]
	if h == nil {
		h = &holding{}
		l.bySource[source] = h
	}
	h.open++
	lc.listLocked(&l.awaitingHeader)
	l.mu.Unlock()
	if victim != nil {
		// The raw connection, without TLS's close_notify, which could
		// block on a client that does not read.
		l.closedAtCapacity.Add(1)
		victim.Conn.Close()
	}
	return lc, nil
}

// victimLocked returns the connection to close at the cap for a newcomer
// from source, by the rules of Listener; else whether to refuse the
// newcomer outright (rule 2), and how long until a connection may be past
// its grace.
func (l *Listener) victimLocked(source netip.Addr) (victim *limitedConn, refuse bool, wait time.Duration) {
	// The address holding the most connections, of those holding one that
	// is not serving: the only one that can give one up to a lighter one.
	var heaviest netip.Addr
	most := 0
	for addr, h := range l.bySource {
		if h.unused > 0 && h.open > most {
			heaviest, most = addr, h.open
		}
	}
	mine := 0
	if h := l.bySource[source]; h != nil {
		mine = h.open
	}
	// Rule 1: a fair share.
	if most >= mine+2 {
		for _, q := range []*list.List{&l.idle, &l.awaitingHeader} {
			for e := q.Front(); e != nil; e = e.Next() {
				if c := e.Value.(*limitedConn); c.source == heaviest {
					return c, false, 0
				}
			}
		}
	}
	// Rule 2: no rotation for a flood.
	if mine > l.max/2 && len(l.bySource) > 1 {
		return nil, true, 0
	}
	// Rule 3: a connection past its grace, of an address at least as
	// heavy as the newcomer's, the heaviest first.
	now := time.Since(l.epoch)
	wait = l.idleGrace
	var best *limitedConn
	for e := l.awaitingHeader.Front(); e != nil; e = e.Next() {
		c := e.Value.(*limitedConn)
		if left := l.headerGrace - c.waitedBy(now); left > 0 {
			wait = min(wait, left)
			continue
		}
		if l.bySource[c.source].open >= mine && (best == nil || l.bySource[c.source].open > l.bySource[best.source].open) {
			best = c
		}
	}
	if best != nil {
		return best, false, 0
	}
	for e := l.idle.Front(); e != nil; e = e.Next() {
		c := e.Value.(*limitedConn)
		if idle := time.Since(c.idleSince); idle < l.idleGrace {
			// The list is in the order they went idle.
			wait = min(wait, l.idleGrace-idle)
			break
		}
		if l.bySource[c.source].open >= mine && (best == nil || l.bySource[c.source].open > l.bySource[best.source].open) {
			best = c
		}
	}
	return best, false, wait
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
		room := l.open < l.max || l.awaitingHeader.Len()+l.idle.Len() > 0
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
		c.headerComplete.Store(true)
		c.unlistLocked()
	case http.StateIdle:
		c.unlistLocked()
		c.idleSince = time.Now()
		c.listLocked(&l.idle)
	case http.StateHijacked, http.StateClosed:
		c.releaseLocked()
	}
}

// listLocked puts the connection at the back of q, where it may be closed
// at the cap.
func (c *limitedConn) listLocked(q *list.List) {
	c.in, c.elem = q, q.PushBack(c)
	c.limiter.bySource[c.source].unused++
}

func (c *limitedConn) unlistLocked() {
	if c.in != nil {
		c.in.Remove(c.elem)
		c.in, c.elem = nil, nil
		c.limiter.bySource[c.source].unused--
	}
}

// releaseLocked gives the connection's place back.
func (c *limitedConn) releaseLocked() {
	if c.released {
		return
	}
	c.released = true
	c.unlistLocked()
	l := c.limiter
	l.open--
	h := l.bySource[c.source]
	if h.open--; h.open == 0 {
		delete(l.bySource, c.source)
	}
	l.signalFreed()
}

// waitedBy returns how long the server has waited in Read for the
// connection's first request header, at now (since the limiter's epoch).
func (c *limitedConn) waitedBy(now time.Duration) time.Duration {
	waited := time.Duration(c.waited.Load())
	if since := c.readingSince.Load(); since != 0 {
		waited += now - time.Duration(since)
	}
	return waited
}

// Read reads from the connection, timing each read until the first request
// header is complete (the header grace), and counts a connection closed
// because that header did not come in time: net/http's ReadHeaderTimeout,
// which also bounds the TLS handshake, is a deadline on this connection
// while it awaits that header.
func (c *limitedConn) Read(p []byte) (int, error) {
	if c.headerComplete.Load() {
		return c.Conn.Read(p)
	}
	start := time.Since(c.limiter.epoch)
	c.readingSince.Store(int64(max(start, 1)))
	n, err := c.Conn.Read(p)
	c.waited.Add(int64(time.Since(c.limiter.epoch) - start))
	c.readingSince.Store(0)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.limiter.mu.Lock()
		awaitingHeader := c.in == &c.limiter.awaitingHeader
		c.limiter.mu.Unlock()
		if awaitingHeader {
			c.limiter.headerTimeouts.Add(1)
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
