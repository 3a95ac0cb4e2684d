// Package limits holds Listener, which bounds the connections a server holds
// open and never closes one that behaves to make room for another.
package limits

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// HandshakeGrace is how long, in all, a handshake may make the server
	// wait in reads: the apiserver sends its part at once.
	HandshakeGrace = 250 * time.Millisecond

	// IdleGrace is how long an unused connection is spared: under load the
	// apiserver reuses one within milliseconds.
	IdleGrace = 500 * time.Millisecond

	// KeptAliveAllowance is how many unused connections an address may keep
	// and be spared: client-go's MaxIdleConnsPerHost is 25.
	KeptAliveAllowance = 32

	// SilenceGrace is how long a lone address's handshake may send nothing:
	// in a burst of 600, race detector on, both cores busy, 0.7 s at most.
	SilenceGrace = 2 * time.Second

	// MaxWaiting is how many newcomers may wait, as Linux's default
	// somaxconn: 1,000 writes through the apiserver left 1,282 waiting
	// (e2e TestBurstServed), its dials outnumbering its calls.
	MaxWaiting = 4096

	// NewestFirstAfter is how long an address's oldest newcomer waits before
	// the newest go first: the kubelet's probe gives up after 1 s.
	NewestFirstAfter = time.Second

	// HandshakeTimeout bounds a handshake, as client-go's TLSHandshakeTimeout.
	HandshakeTimeout = 10 * time.Second
)

// Listener accepts connections, does their TLS handshakes, and holds at
// most max of them open. It guarantees:
//
// A connection that behaves is never closed to make room for another. It
// behaves while its handshake has made the server wait in reads less than
// HandshakeGrace, while it is served, and while it is unused (kept alive,
// or with no whole request header yet) by an address keeping at most
// KeptAliveAllowance unused. The apiserver's always behave.
//
// A newcomer that finds no place waits in the process, holding only its
// socket, so that none waits in the kernel behind a flood. Places go first
// to the newcomers of the address holding the fewest connections, and no
// address holds more than max less a sixteenth, so that a probe, or another
// apiserver, finds one during any one client's burst. An address's
// newcomers are served oldest first, and past MaxWaiting the newest of the
// address with the most waiting is closed ("shed"); once its oldest has
// waited NewestFirstAfter, the reverse (adaptive LIFO): a probe or the
// apiserver's next connection is served at once, and the apiserver's
// transport gives any connection that comes free to its oldest request.
//
// Only for a waiting newcomer is a connection closed, and only one that
// misbehaves: "stalled" (its handshake made the server wait
// HandshakeGrace) or "idle" (unused for IdleGrace while its address keeps
// more than KeptAliveAllowance unused), of another address than the
// newcomer's: a client's newcomers wait for its own. When one address
// holds them all, as behind a proxy, they take its own "idle", and its
// "stalled" that sent nothing for SilenceGrace from their accept or, for
// a second after a shed, made the server wait HandshakeGrace before their
// first request header: the apiserver, alone in a burst on a busy host,
// is slow in its handshakes but never fills the line. No connection being
// served is ever closed.
//
// A handshake that fails or lasts HandshakeTimeout closes its connection
// ("handshake"). Accept returns each connection once its handshake is done,
// as a *tls.Conn (without a TLS configuration, the TCP connection): serve
// it with http.Server.Serve, not ServeTLS, with the server's ConnState set
// to the Listener's. Close closes the connections Accept has not returned.
type Listener struct {
	raw        net.Listener
	tlsConfig  *tls.Config
	max        int
	perAddress int
	epoch      time.Time // the connections' clocks count from it

	ready chan net.Conn // handshakes done, for Accept
	wake  chan struct{} // a change that may make room
	done  chan struct{}
	once  sync.Once
	err   error // why Accept stops, once done is closed

	mu      sync.Mutex
	conns   map[*conn]bool // those holding a place
	waiting map[netip.Addr][]*conn
	queued  int       // newcomers waiting
	shedAt  time.Time // when one was last shed
	closed  map[string]uint64
}

// phase is where a connection is in its life, as the Listener judges it.
type phase int32

const (
	handshaking phase = iota
	unused            // kept alive, or no whole request header yet
	serving
)

// conn is a connection waiting for a place, or holding one.
type conn struct {
	net.Conn
	l        *Listener
	source   netip.Addr
	accepted time.Time
	phase    atomic.Int32
	since    time.Time // when it came to its phase, under l.mu
	// The server's waiting in Read before the first request header, and
	// when the Read waiting now began (since l.epoch; 0 when none is).
	waited, readingSince atomic.Int64
	heard                atomic.Bool // a byte of the handshake came
	served               atomic.Bool // a request header came whole
}

// NewListener returns a Listener of at most max connections from ln, with
// TLS by tlsConfig, or none when it is nil. It accepts from ln at once.
func NewListener(ln net.Listener, tlsConfig *tls.Config, max int) *Listener {
	l := &Listener{raw: ln, tlsConfig: tlsConfig, max: max, perAddress: max - max/16, epoch: time.Now(),
		ready: make(chan net.Conn), wake: make(chan struct{}, 1), done: make(chan struct{}),
		conns: map[*conn]bool{}, waiting: map[netip.Addr][]*conn{}, closed: map[string]uint64{}}
	go l.acceptAll()
	go l.keepRoom()
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
	for c := range l.conns {
		if phase(c.phase.Load()) == handshaking {
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

// Stats is what a Listener holds, and has closed by reason ("shed",
// "stalled", "idle", and "handshake" for one that failed), for the metrics.
type Stats struct {
	Max, Open, Waiting int
	Closed             map[string]uint64
}

// Stats returns what l holds now, and has closed so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Max: l.max, Open: len(l.conns), Waiting: l.queued, Closed: map[string]uint64{}}
	for _, reason := range []string{"shed", "stalled", "idle", "handshake"} {
		s.Closed[reason] = l.closed[reason]
	}
	return s
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
		c := &conn{Conn: nc, l: l, source: sourceOf(nc), accepted: time.Now()}
		l.waiting[c.source] = append(l.waiting[c.source], c)
		if l.queued++; l.queued > MaxWaiting {
			var most netip.Addr
			for addr, q := range l.waiting {
				if len(q) > len(l.waiting[most]) {
					most = addr
				}
			}
			l.takeLocked(most, true).Conn.Close()
			l.closed["shed"]++
			l.shedAt = time.Now()
		}
		l.mu.Unlock()
		l.signal()
	}
}

// keepRoom gives waiting newcomers places as places come free, or as
// connections come to misbehave.
func (l *Listener) keepRoom() {
	for {
		l.mu.Lock()
		stillWaiting := l.makeRoomLocked()
		l.mu.Unlock()
		var recheck <-chan time.Time
		if stillWaiting {
			recheck = time.After(HandshakeGrace / 5)
		}
		select {
		case <-l.wake:
		case <-recheck:
		case <-l.done:
			return
		}
	}
}

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// makeRoomLocked gives waiting newcomers the places there are, and those
// it can make, and reports whether any still wait.
func (l *Listener) makeRoomLocked() (stillWaiting bool) {
	for l.queued > 0 {
		openBy, unusedBy := map[netip.Addr]int{}, map[netip.Addr]int{}
		for c := range l.conns {
			openBy[c.source]++
			if phase(c.phase.Load()) == unused {
				unusedBy[c.source]++
			}
		}
		// The lightest address with a newcomer a place can go to.
		var next netip.Addr
		var victim *conn
		var reason string
		found := false
		for addr := range l.waiting {
			atCap, alone := openBy[addr] >= l.perAddress, openBy[addr] == len(l.conns)
			if atCap && !alone || found && openBy[addr] >= openBy[next] {
				continue
			}
			if len(l.conns) < l.max && !atCap {
				next, victim, found = addr, nil, true
			} else if v, why := l.victimLocked(addr, alone, unusedBy); v != nil {
				next, victim, reason, found = addr, v, why, true
			}
		}
		if !found {
			return true
		}
		if victim != nil {
			l.closed[reason]++
			victim.releaseLocked()
			// The raw connection: TLS's close_notify could block on a
			// client that does not read.
			victim.Conn.Close()
		}
		c := l.takeLocked(next, false)
		l.conns[c] = true
		if l.tlsConfig == nil {
			c.setPhaseLocked(unused)
			go l.handOver(c, c)
		} else {
			go l.handshake(c)
		}
	}
	return false
}

// takeLocked takes source's next newcomer to serve, or with shed the next
// to shed: the oldest and the newest, the reverse once the oldest has
// waited NewestFirstAfter.
func (l *Listener) takeLocked(source netip.Addr, shed bool) *conn {
	q := l.waiting[source]
	c, rest := q[0], q[1:]
	if shed != (time.Since(q[0].accepted) >= NewestFirstAfter) {
		c, rest = q[len(q)-1], q[:len(q)-1]
	}
	l.queued--
	if l.waiting[source] = rest; len(rest) == 0 {
		delete(l.waiting, source)
	}
	return c
}

// victimLocked returns a connection that misbehaves, and why, of another
// address than source unless source is alone, or nil; of those unused,
// the one unused the longest. (Taking a lone address's own handshakes
// begun failed 60 of 600 requests of TestBurstAboveTheCap under the race
// detector; that burst never made the listener shed.)
func (l *Listener) victimLocked(source netip.Addr, alone bool, unusedBy map[netip.Addr]int) (*conn, string) {
	now, flooded := time.Since(l.epoch), time.Since(l.shedAt) < time.Second
	var victim *conn
	for c := range l.conns {
		stalled := c.waitedBy(now) >= HandshakeGrace
		switch {
		case c.source == source && !alone: // the newcomer waits for its own
		case c.source == source && flooded && !c.served.Load() && stalled:
			return c, "stalled"
		case phase(c.phase.Load()) == handshaking && stalled && (c.source != source || !c.heard.Load() && time.Since(c.accepted) >= SilenceGrace):
			return c, "stalled"
		case phase(c.phase.Load()) == unused && time.Since(c.since) >= IdleGrace && unusedBy[c.source] > KeptAliveAllowance &&
			(victim == nil || c.since.Before(victim.since)):
			victim = c
		}
	}
	return victim, "idle"
}

// handshake does c's TLS handshake, and hands c to Accept.
func (l *Listener) handshake(c *conn) {
	tc := tls.Server(c, l.tlsConfig)
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	l.mu.Lock()
	switch {
	case !l.conns[c]: // closed for a newcomer
		err = net.ErrClosed
	case err != nil:
		l.closed["handshake"]++
	default:
		c.setPhaseLocked(unused)
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
		c.Close()
	}
}

// ConnState is the server's http.Server.ConnState: it follows each
// connection between requests, and gives back the place of one closed.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateActive:
		c.served.Store(true)
		c.setPhaseLocked(serving)
	case http.StateIdle:
		c.setPhaseLocked(unused)
	case http.StateHijacked, http.StateClosed:
		c.releaseLocked()
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

func (c *conn) setPhaseLocked(p phase) {
	c.phase.Store(int32(p))
	c.since = time.Now()
}

// releaseLocked gives c's place back.
func (c *conn) releaseLocked() {
	if c.l.conns[c] {
		delete(c.l.conns, c)
		c.l.signal()
	}
}

// waitedBy returns how long the server has waited in Read for c's
// handshake and first request header, at now (since the epoch).
func (c *conn) waitedBy(now time.Duration) time.Duration {
	waited := time.Duration(c.waited.Load())
	if since := c.readingSince.Load(); since != 0 {
		waited += now - time.Duration(since)
	}
	return waited
}

// Read reads from the connection, counting the server's waiting until the
// first request header.
func (c *conn) Read(p []byte) (int, error) {
	if c.served.Load() {
		return c.Conn.Read(p)
	}
	start := time.Since(c.l.epoch)
	c.readingSince.Store(int64(max(start, 1)))
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.Store(true)
	}
	c.waited.Add(int64(time.Since(c.l.epoch) - start))
	c.readingSince.Store(0)
	return n, err
}

// Close gives the connection's place back and closes it.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.releaseLocked()
	c.l.mu.Unlock()
	return c.Conn.Close()
}
