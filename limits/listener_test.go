package limits

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"

	"sync/atomic"
	"testing"
	"time"
)

// The graces the tests run with: the webhook's own (its connections.go).
const (
	headerGrace = 250 * time.Millisecond
	idleGrace   = time.Second
)

// limitedServer serves plain HTTP through a Listener of max connections:
// / answers at once, /block waits for release.
type limitedServer struct {
	addr    string
	limiter *Listener
	release chan struct{}
	entered chan struct{} // a request to /block is being served
}

func newLimitedServer(t *testing.T, max int) *limitedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &limitedServer{addr: ln.Addr().String(), release: make(chan struct{}), entered: make(chan struct{}, max)}
	s.limiter = NewListener(ln, max, headerGrace, idleGrace)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		s.entered <- struct{}{}
		<-s.release
	})
	srv := &http.Server{Handler: mux, ConnState: s.limiter.ConnState, IdleTimeout: time.Minute}
	go srv.Serve(s.limiter)
	t.Cleanup(func() { close(s.release); srv.Close() })
	return s
}

// count returns the connections the listener closed for reason.
func (s *limitedServer) count(reason string) int {
	return int(s.limiter.Closed()[reason])
}

func (s *limitedServer) dial(t *testing.T) net.Conn {
	t.Helper()
	return s.dialFrom(t, "127.0.0.1")
}

// dialFrom connects from the loopback address from, as another client
// host would.
func (s *limitedServer) dialFrom(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// get sends GET path on conn and reads the answer.
func get(conn net.Conn, path string) error {
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: webhook\r\n\r\n", path)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

// closedByServer reports whether the server has closed conn.
func closedByServer(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func (s *limitedServer) waitOpen(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.limiter.Open() != want {
		if time.Now().After(deadline) {
			t.Fatalf("got %d connections open, want %d", s.limiter.Open(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestManyHalfOpenConnections fills the port with connections that have
// sent half a header: a newcomer is refused while they are within their
// grace, and served after it, in place of the oldest of them.
func TestManyHalfOpenConnections(t *testing.T) {
	const max = 4
	s := newLimitedServer(t, max)
	var half []net.Conn
	for range max {
		c := s.dial(t)
		io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: web")
		half = append(half, c)
		time.Sleep(5 * time.Millisecond) // so that they are in order
	}
	s.waitOpen(t, max)
	if err := get(s.dial(t), "/"); err == nil {
		t.Error("a newcomer while every connection is within its grace was served, want it refused")
	}
	if got := s.count("refused"); got != 1 {
		t.Errorf("newcomers refused: got %d, want 1", got)
	}
	time.Sleep(headerGrace)
	if err := get(s.dial(t), "/"); err != nil {
		t.Fatalf("a newcomer past the grace: %v, want it served", err)
	}
	if !closedByServer(half[0]) {
		t.Error("the oldest half-open connection is still open, want it closed to make room")
	}
	for i, c := range half[1:] {
		if closedByServer(c) {
			t.Errorf("half-open connection %d was closed, want only the oldest", i+1)
		}
	}
	if got := s.count("capacity"); got != 1 {
		t.Errorf("connections closed at the cap: got %v, want 1", got)
	}
}

// TestFairShare fills the port from one address with connections within
// their grace, half-open and idle: a newcomer from another address is
// served at once in place of one of them, the one idle the longest first,
// while one more from the flooding address is still refused.
func TestFairShare(t *testing.T) {
	const max = 4
	s := newLimitedServer(t, max)
	var idle, half []net.Conn
	for i := range max {
		c := s.dial(t)
		if i < 2 {
			if err := get(c, "/"); err != nil {
				t.Fatal(err)
			}
			idle = append(idle, c)
		} else {
			io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: web")
			half = append(half, c)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.waitOpen(t, max)
	if err := get(s.dial(t), "/"); err == nil {
		t.Error("a newcomer from the flooding address was served, want it refused")
	}
	// 127.0.0.1 holds 4, 127.0.0.2 none: the first newcomer from .2 takes
	// the place of .1's longest idle, the second that of the other idle.
	for i := range 2 {
		c := s.dialFrom(t, "127.0.0.2")
		if err := get(c, "/"); err != nil {
			t.Fatalf("newcomer %d from another address: %v, want it served at once", i, err)
		}
	}
	// Now .1 holds 2 and .2 holds 2: a third from .2 is not owed a place.
	if err := get(s.dialFrom(t, "127.0.0.2"), "/"); err == nil {
		t.Error("a newcomer from an address holding its share was served, want it refused")
	}
	for i, c := range idle {
		if !closedByServer(c) {
			t.Errorf("idle connection %d from the flooding address is open, want it closed for the newcomers", i)
		}
	}
	for i, c := range half {
		if closedByServer(c) {
			t.Errorf("half-open connection %d was closed, want the idle ones to go first", i)
		}
	}
	if got := s.count("refused"); got != 2 {
		t.Errorf("newcomers refused: got %d, want 2", got)
	}
	if got := s.count("capacity"); got != 2 {
		t.Errorf("connections closed at the cap: got %d, want 2", got)
	}
}

// TestIdleConnectionsMakeRoom fills the port with kept-alive connections
// that sent one request each: past idleGrace, a newcomer is served in
// place of the one idle the longest, never of one used a moment ago.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	const max = 4
	s := newLimitedServer(t, max)
	var idle []net.Conn
	for range max {
		c := s.dial(t)
		if err := get(c, "/"); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(idleGrace)
	// The first is used again: now the second has been idle the longest.
	if err := get(idle[0], "/"); err != nil {
		t.Fatal(err)
	}
	if err := get(s.dial(t), "/"); err != nil {
		t.Fatalf("a new client at the cap: %v, want it served", err)
	}
	for i, c := range idle {
		if got, want := closedByServer(c), i == 1; got != want {
			t.Errorf("idle connection %d: closed %v, want %v (only the one idle the longest)", i, got, want)
		}
	}
}

// TestCapacityOrder: at the cap, a connection silent past headerGrace goes
// before one idle past idleGrace; one used a moment ago is never closed.
func TestCapacityOrder(t *testing.T) {
	s := newLimitedServer(t, 3)
	idle1, idle2 := s.dial(t), s.dial(t)
	for _, c := range []net.Conn{idle1, idle2} {
		if err := get(c, "/"); err != nil {
			t.Fatal(err)
		}
	}
	silent := s.dial(t)
	s.waitOpen(t, 3)
	time.Sleep(idleGrace)
	// All three qualify; the silent one goes first.
	if err := get(s.dial(t), "/"); err != nil {
		t.Fatal(err)
	}
	if !closedByServer(silent) || closedByServer(idle1) || closedByServer(idle2) {
		t.Error("want the silent connection closed first, the idle ones kept")
	}
	// idle2 is used again: idle1 has been idle the longest, and goes.
	if err := get(idle2, "/"); err != nil {
		t.Fatal(err)
	}
	if err := get(s.dial(t), "/"); err != nil {
		t.Fatal(err)
	}
	if !closedByServer(idle1) || closedByServer(idle2) {
		t.Error("want the connection idle the longest closed, and the one used a moment ago kept")
	}
}

// TestServingConnectionsAreNeverCut fills the port with requests being
// served: the next connection waits for one of them to finish, in the
// kernel's backlog, instead of cutting a request.
func TestServingConnectionsAreNeverCut(t *testing.T) {
	const max = 3
	s := newLimitedServer(t, max)
	busy := make(chan error, max)
	for range max {
		c := s.dial(t)
		go func() { busy <- get(c, "/block") }()
	}
	for range max {
		<-s.entered
	}
	served := make(chan error, 1)
	go func() { served <- get(s.dial(t), "/") }()
	select {
	case err := <-served:
		t.Fatalf("a new client was served (%v) while every connection was serving a request; want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	// One request finishes; its connection, idle now, makes room.
	s.release <- struct{}{}
	if err := <-served; err != nil {
		t.Errorf("the waiting client: %v, want it served once a request finished", err)
	}
	// Every request that was being served is answered, none cut.
	for range max - 1 {
		s.release <- struct{}{}
	}
	for range max {
		if err := <-busy; err != nil {
			t.Errorf("a request being served: %v, want it answered", err)
		}
	}
	if got := s.limiter.Open(); got != max {
		t.Errorf("connections open: got %d, want %d", got, max)
	}
	if got := s.limiter.Max(); got != max {
		t.Errorf("Max: got %d, want %d", got, max)
	}
}

// TestVictimOfTheHeaviestAddress: of the connections past their grace at
// the cap, the one closed is of the address holding the most, though
// another address's is older: a slow apiserver connection is spared in
// favour of a flood's.
func TestVictimOfTheHeaviestAddress(t *testing.T) {
	const max = 4
	s := newLimitedServer(t, max)
	lone := s.dialFrom(t, "127.0.0.3")
	io.WriteString(lone, "POST /validate HTTP/1.1\r\nHost: web")
	time.Sleep(5 * time.Millisecond)
	var flood []net.Conn
	for range max - 1 {
		c := s.dialFrom(t, "127.0.0.2")
		io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: web")
		flood = append(flood, c)
		time.Sleep(5 * time.Millisecond)
	}
	s.waitOpen(t, max)
	time.Sleep(headerGrace)
	if err := get(s.dial(t), "/"); err != nil {
		t.Fatalf("a newcomer past the grace: %v, want it served", err)
	}
	if closedByServer(lone) {
		t.Error("the lone address's connection, the oldest, was closed; want one of the flooding address's")
	}
	if !closedByServer(flood[0]) {
		t.Error("the flooding address's oldest connection is open; want it closed to make room")
	}
}

// tlsLimitedServer serves HTTPS through a Listener of max connections,
// counting the TLS handshakes it begins; a ClientHello from slowFrom waits
// slowBy in the server, as when a flood's handshakes or a node's other
// work take its CPU.
type tlsLimitedServer struct {
	*limitedServer
	handshakes   atomic.Int64
	config       *tls.Config // the clients'
	serverConfig *tls.Config
}

func newTLSLimitedServer(t *testing.T, max int, slowFrom string, slowBy time.Duration) *tlsLimitedServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsLimitedServer{limitedServer: &limitedServer{addr: ln.Addr().String(), release: make(chan struct{}), entered: make(chan struct{}, max)},
		config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}
	s.limiter = NewListener(ln, max, headerGrace, idleGrace)
	s.serverConfig = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		s.handshakes.Add(1)
		if host, _, _ := net.SplitHostPort(hello.Conn.RemoteAddr().String()); host == slowFrom {
			time.Sleep(slowBy)
		}
		return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
	}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ConnState: s.limiter.ConnState, IdleTimeout: time.Minute, TLSConfig: s.serverConfig.Clone()}
	go srv.ServeTLS(s.limiter, "", "")
	t.Cleanup(func() { srv.Close() })
	return s
}

// dialTLSFrom opens a TLS connection from the loopback address from.
func (s *tlsLimitedServer) dialTLSFrom(from string) (*tls.Conn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}, Config: s.config}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

// TestFloodRefusedBeforeHandshake fills the port from one address with
// connections past their grace while another address holds one: the
// flooding address's newcomers are refused before their TLS handshake,
// not let in in place of its own connections at the cost of one, while a
// newcomer from a third address is served.
func TestFloodRefusedBeforeHandshake(t *testing.T) {
	const max = 4
	s := newTLSLimitedServer(t, max, "", 0)
	apiserver, err := s.dialTLSFrom("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer apiserver.Close()
	if err := get(apiserver, "/"); err != nil {
		t.Fatal(err)
	}
	var flood []*tls.Conn
	for range max - 1 {
		c, err := s.dialTLSFrom("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: web")
		flood = append(flood, c)
	}
	s.waitOpen(t, max)
	time.Sleep(headerGrace + 100*time.Millisecond) // every flood connection is past its grace
	before := s.handshakes.Load()

	const newcomers = 5
	for i := range newcomers {
		if c, err := s.dialTLSFrom("127.0.0.1"); err == nil {
			c.Close()
			t.Errorf("flood newcomer %d completed its handshake, want it refused before", i)
		}
	}
	if got := s.handshakes.Load() - before; got != 0 {
		t.Errorf("the server began %d handshakes for the flood's newcomers, want 0", got)
	}
	if got := s.count("refused"); got != newcomers {
		t.Errorf("newcomers refused: got %d, want %d", got, newcomers)
	}
	for i, c := range flood {
		if closedByServer(c) {
			t.Errorf("flood connection %d was closed for a newcomer of its own address, want it kept", i)
		}
	}
	kubelet, err := s.dialTLSFrom("127.0.0.3")
	if err != nil {
		t.Fatalf("a newcomer from a third address: %v, want it served", err)
	}
	defer kubelet.Close()
	if err := get(kubelet, "/"); err != nil {
		t.Errorf("a newcomer from a third address: %v, want it served", err)
	}
	if err := get(apiserver, "/"); err != nil {
		t.Errorf("the second address's kept-alive connection: %v, want it served", err)
	}
}

// TestSlowHandshakeKept: a connection whose handshake waits for the
// server, not for its client, has not used its grace, however long it
// takes: a newcomer of its own address is refused rather than served in
// its place.
func TestSlowHandshakeKept(t *testing.T) {
	const max = 3
	s := newTLSLimitedServer(t, max, "127.0.0.1", 4*headerGrace)
	// The slow one first, so that it is the oldest.
	slowDone := make(chan error, 1)
	go func() {
		c, err := s.dialTLSFrom("127.0.0.1")
		if err == nil {
			defer c.Close()
			err = get(c, "/")
		}
		slowDone <- err
	}()
	s.waitOpen(t, 1)
	// Past headerGrace on the clock; then the port fills with connections
	// that are not past it in time the server waited for them.
	time.Sleep(headerGrace + 50*time.Millisecond)
	for range max - 1 {
		c := s.dialFrom(t, "127.0.0.1") // TCP only: the server waits for its ClientHello
		defer c.Close()
	}
	s.waitOpen(t, max)
	if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
		c.SetReadDeadline(time.Now().Add(time.Second))
		c.Read(make([]byte, 1)) // until the listener decides
		c.Close()
	}
	if err := <-slowDone; err != nil {
		t.Errorf("the connection whose handshake waited for the server: %v, want it served", err)
	}
	if got := s.count("capacity"); got != 0 {
		t.Errorf("connections closed at the cap: got %d, want 0 (the newcomer refused)", got)
	}
}

// TestNeverALighterAddress: a newcomer never takes the place of a
// connection of an address holding fewer than its own, even one past its
// grace: it may be the apiserver's, slowed by the flood.
func TestNeverALighterAddress(t *testing.T) {
	const max = 5
	s := newLimitedServer(t, max)
	lone := s.dialFrom(t, "127.0.0.2")
	io.WriteString(lone, "POST /validate HTTP/1.1\r\nHost: web")
	time.Sleep(headerGrace + 50*time.Millisecond) // lone is past its grace
	for _, from := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.3", "127.0.0.3"} {
		s.dialFrom(t, from)
	}
	s.waitOpen(t, max)
	if err := get(s.dialFrom(t, "127.0.0.1"), "/"); err == nil {
		t.Error("a newcomer from an address holding 2 was served, want it refused: the only connection past its grace is of an address holding 1")
	}
	if closedByServer(lone) {
		t.Error("the lighter address's connection was closed for a newcomer of a heavier one, want it kept")
	}
}

// TestHTTP2ServingNeverCut: an HTTP/2 connection serving a request is not
// closed at the cap (net/http's HTTP/2 server reports its state through
// ConnState, as HTTP/1.1's does); a silent connection beside it is.
func TestHTTP2ServingNeverCut(t *testing.T) {
	const max = 2
	s := newTLSLimitedServer(t, max, "", 0)
	// A second server on the same listener's kind, speaking HTTP/2, its
	// /block held until the test lets it go.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limiter := NewListener(ln, max, headerGrace, idleGrace)
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	})
	serverConfig := s.serverConfig.Clone()
	serverConfig.NextProtos = []string{"h2", "http/1.1"}
	srv := &http.Server{Handler: mux, ConnState: limiter.ConnState,
		TLSConfig: serverConfig, HTTP2: &http.HTTP2Config{}, IdleTimeout: time.Minute}
	go srv.ServeTLS(limiter, "", "")
	t.Cleanup(func() { srv.Close() })

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: s.config, ForceAttemptHTTP2: true}}
	served := make(chan error, 1)
	go func() {
		resp, err := client.Get("https://" + ln.Addr().String() + "/block")
		if err == nil {
			defer resp.Body.Close()
			if resp.ProtoMajor != 2 {
				err = fmt.Errorf("served over %s, want HTTP/2", resp.Proto)
			} else {
				_, err = io.ReadAll(resp.Body)
			}
		}
		served <- err
	}()
	<-entered
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for limiter.Open() != max {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(headerGrace + 100*time.Millisecond) // both have made the server wait past the grace
	newcomer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer newcomer.Close()
	if !closedByServer(silent) {
		t.Error("the silent connection is open, want it closed for the newcomer")
	}
	close(release)
	if err := <-served; err != nil {
		t.Errorf("the HTTP/2 request being served: %v, want it answered", err)
	}
}
