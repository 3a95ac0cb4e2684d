package main

import (
	"container/list"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
)

// maxConnections is the most connections the review port holds open at
// once. Each costs memory whatever it sends: net/http's and crypto/tls's
// buffers, a goroutine's stack, and up to smallBodyBytes of body (body.go).
// bench/README.md measures it ("Hostile clients"): 256 connections, on
// top of the byte budget's worst case, stay under the Deployment's 64 MiB
// limit. It is also far more than the apiservers need: each keeps at most
// 25 idle connections to a webhook host (CONTRACT.md), and a review takes
// milliseconds.
const maxConnections = 256

// connLimiter is the review port's listener: it keeps at most max
// connections open. At the cap it makes room by closing a connection that
// is not serving a request: first the oldest that has not yet sent a
// complete request header (a new connection does in milliseconds; a
// client that dribbles its headers is the likeliest to be hostile), then
// the one idle the longest (the apiserver's pooled connections are reused
// every few milliseconds under load; a connection that sent one review and
// holds on is the one it can best do without). A request being served is
// never cut. Only when every connection is serving does the next one wait,
// in the kernel's backlog, for one to finish: refusing it instead would
// fail an apiserver's call that a moment's wait would serve.
//
// The listener learns each connection's state from http.Server.ConnState
// (connState).
type connLimiter struct {
	net.Listener
	max     int
	metrics *metrics

	mu    sync.Mutex
	open  int           // connections open, and accepts under way
	fresh list.List     // of *limitedConn: no complete request header yet, oldest first
	idle  list.List     // of *limitedConn: between requests, longest idle first
	freed chan struct{} // a place was given back, or a connection can be closed
	done  chan struct{} // closed with the listener
	once  sync.Once
}

// limitedConn is a connection the limiter holds a place for.
type limitedConn struct {
	net.Conn
	limiter *connLimiter
	// in and elem are where the connection waits while it may be closed at
	// the cap (fresh or idle); nil while it serves a request.
	in       *list.List
	elem     *list.Element
	released bool // its place is given back; under limiter.mu
}

func newConnLimiter(ln net.Listener, max int, m *metrics) *connLimiter {
	l := &connLimiter{Listener: ln, max: max, metrics: m, freed: make(chan struct{}, 1), done: make(chan struct{})}
	m.setConnections(l)
	return l
}

// Accept accepts the next connection once there is room for it, closing
// a connection that is not serving if the port is full.
func (l *connLimiter) Accept() (net.Conn, error) {
	// Wait before accepting, so that a client the port has no room for
	// waits in the kernel's backlog rather than in this process.
	if err := l.waitForRoom(); err != nil {
		return nil, err
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, limiter: l}
	// Only now that a connection has come is one closed for it: net/http
	// calls Accept again as soon as it has one, long before the next
	// arrives. In between, the one that was there to close may have begun
	// a request; then this connection waits, unserved, like one in the
	// backlog.
	var victim *limitedConn
	for {
		l.mu.Lock()
		if l.open < l.max {
			break
		}
		if e := l.fresh.Front(); e != nil {
			victim = e.Value.(*limitedConn)
		} else if e := l.idle.Front(); e != nil {
			victim = e.Value.(*limitedConn)
		}
		if victim != nil {
			victim.releaseLocked()
			break
		}
		l.mu.Unlock()
		select {
		case <-l.freed:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	l.open++
	lc.in, lc.elem = &l.fresh, l.fresh.PushBack(lc)
	l.mu.Unlock()
	if victim != nil {
		// The raw connection, without TLS's close_notify, which could
		// block on a client that does not read.
		victim.Conn.Close()
		l.metrics.connectionClosed("capacity")
	}
	return lc, nil
}

// waitForRoom returns once the port has room for one more connection, or
// a connection it can close to make some.
func (l *connLimiter) waitForRoom() error {
	for {
		l.mu.Lock()
		room := l.open < l.max || l.fresh.Len()+l.idle.Len() > 0
		l.mu.Unlock()
		if room {
			return nil
		}
		select {
		case <-l.freed:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

func (l *connLimiter) signalFreed() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// Close closes the listener and wakes an Accept waiting for room.
func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// count returns the connections open, for the metrics.
func (l *connLimiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// connState is the server's http.Server.ConnState: it moves a connection
// between the lists, and counts one that timed out before it sent a
// complete request.
func (l *connLimiter) connState(nc net.Conn, state http.ConnState) {
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
		c.in, c.elem = &l.idle, l.idle.PushBack(c)
		l.signalFreed()
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
			c.limiter.metrics.connectionClosed("header_timeout")
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
