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
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// patience is how long the tests' clients wait for an answer: what they
// check is that nothing is lost, not the machine's speed. Beside three
// busy loops a core, under the race detector, a burst took 45 s.
const patience = time.Minute

// testServer serves HTTPS through a Listener: / answers at once, /block
// waits until the test ends, /hold until release is called, /slow
// answers after 20 ms.
type testServer struct {
	addr     string
	listener *Listener
	client   *tls.Config
	blocked  atomic.Int64 // requests to /block being served
	held     atomic.Int64 // requests to /hold being served
	release  func()
}

func newTestServer(t *testing.T, max int) *testServer {
	t.Helper()
	return newTestServerOn(t, max, func(ln net.Listener) net.Listener { return ln })
}

// newTestServerOn is newTestServer on what wrap makes of its TCP listener.
func newTestServerOn(t *testing.T, max int, wrap func(net.Listener) net.Listener) *testServer {
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
	serverConfig := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, NextProtos: []string{"http/1.1"}}
	s := &testServer{addr: ln.Addr().String(), listener: NewListener(wrap(ln), serverConfig, max),
		// X25519 alone: the default's ML-KEM share would cost each of a
		// burst's hundreds of dials more CPU, race detector on.
		client: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", CurvePreferences: []tls.CurveID{tls.X25519}}}
	release, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.release = func() { once.Do(func() { close(hold) }) }
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		s.blocked.Add(1)
		<-release
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		s.held.Add(1)
		<-hold
	})
	srv := &http.Server{Handler: mux, IdleTimeout: time.Minute, TLSConfig: serverConfig,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
	go srv.Serve(s.listener)
	t.Cleanup(func() { close(release); s.release(); srv.Close() })
	return s
}

// transportFrom is Go's transport as the apiserver's webhook client has
// it (client-go: no cap on connections, 25 idle kept), from the loopback
// address from.
func (s *testServer) transportFrom(from string) *http.Transport {
	return &http.Transport{TLSClientConfig: s.client, MaxIdleConnsPerHost: 25, TLSHandshakeTimeout: 10 * time.Second,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}
}

// dialFrom opens a TCP connection from the loopback address from, as
// another client host would, closed when the test ends.
func (s *testServer) dialFrom(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// tlsFrom is dialFrom with its TLS handshake done.
func (s *testServer) tlsFrom(t *testing.T, from string) *tls.Conn {
	t.Helper()
	c := tls.Client(s.dialFrom(t, from), s.client)
	c.SetDeadline(time.Now().Add(patience))
	if err := c.Handshake(); err != nil {
		t.Fatalf("a handshake from %s: %v", from, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// get sends GET path on c and reads the answer.
func get(c net.Conn, path string) error {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: webhook\r\n\r\n", path)
	c.SetReadDeadline(time.Now().Add(patience))
	defer c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

// closedByServer reports whether the server has closed c.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// countClosed returns how many of conns the server has closed.
func countClosed[C net.Conn](conns []C) int {
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			if closedByServer(c) {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(closed.Load())
}

func (s *testServer) waitFor(t *testing.T, what string, cond func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond(s.listener.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %+v", what, s.listener.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// burst sends n requests to path at once through tr, and returns the
// errors.
func (s *testServer) burst(tr *http.Transport, n int, path string) []error {
	client := &http.Client{Transport: tr, Timeout: patience}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get("https://" + s.addr + path)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// TestBurstAboveTheCap is the apiserver's burst: one client sends more
// requests at once than the listener holds connections, each on a
// connection of its own, and every one is answered. None of its
// connections is closed by the listener: its newcomers wait.
func TestBurstAboveTheCap(t *testing.T) {
	const max, burst = 32, 300
	s := newTestServer(t, max)
	tr := s.transportFrom("127.0.0.1")
	defer tr.CloseIdleConnections()
	errs := s.burst(tr, burst, "/slow")
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed, want none; the first: %v", len(errs), burst, errs[0])
	}
	if closed := s.listener.Stats().Closed; closed["shed"] > 0 {
		t.Errorf("the listener closed connections of the burst: %v, want none", closed)
	}
}

// TestBurstBesideOtherClients is the apiserver's burst while another client
// keeps connections alive and a probe comes: while the burst holds its
// address's share of the places, every request on them in flight and the
// rest of its connections waiting, the probe is served; then the burst is
// served whole, and no kept-alive connection was closed.
func TestBurstBesideOtherClients(t *testing.T) {
	const max, burst = 32, 200
	s := newTestServer(t, max)
	var kept []*tls.Conn
	for range 2 {
		c := s.tlsFrom(t, "127.0.0.2")
		if err := get(c, "/"); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, c)
	}
	tr := s.transportFrom("127.0.0.1")
	defer tr.CloseIdleConnections()
	done := make(chan []error, 1)
	go func() { done <- s.burst(tr, burst, "/hold") }()
	s.waitFor(t, "the burst holding its share", func(Stats) bool { return s.held.Load() == max-max/4 })
	if err := get(s.tlsFrom(t, "127.0.0.3"), "/"); err != nil {
		t.Errorf("the probe during the burst: %v, want it answered", err)
	}
	s.release()
	if errs := <-done; len(errs) > 0 {
		t.Errorf("%d of %d requests failed, want none; the first: %v", len(errs), burst, errs[0])
	}
	if closed := countClosed(kept); closed > 0 {
		t.Errorf("%d kept-alive connections of the other client were closed, want none", closed)
	}
}

// TestNothingClosedForRoom holds every place with connections that look
// like a slowloris's and like a client starved of CPU, which cannot be
// told apart: kept alive unused, half a request header, silent before its
// ClientHello, a handshake begun and stalled. Newcomers of their address
// and of others wait, however long, and none of them is closed; the
// first place to come free goes to the address holding the fewest.
func TestNothingClosedForRoom(t *testing.T) {
	const max = 8 // 6 for one address, 2 for the rest
	s := newTestServer(t, max)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	var held []net.Conn
	for range 2 {
		c := s.tlsFrom(t, "127.0.0.2")
		if err := get(c, "/"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c = s.tlsFrom(t, "127.0.0.2")
		if err := halfHeader(c); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	held = append(held, s.dialFrom(t, "127.0.0.2"))
	stalled := s.dialFrom(t, "127.0.0.2")
	go tls.Client(&helloOnly{Conn: stalled, stop: stop}, s.client).Handshake()
	held = append(held, stalled)
	s.waitFor(t, "the address at its share", func(st Stats) bool { return st.Open == max-2 })
	other := s.tlsFrom(t, "127.0.0.1")
	if err := get(other, "/"); err != nil {
		t.Fatal(err)
	}
	held = append(held, other, s.tlsFrom(t, "127.0.0.1"))
	s.waitFor(t, "every place taken", func(st Stats) bool { return st.Open == max })

	// Newcomers of the two addresses, and of a third.
	own, others, third := s.dialFrom(t, "127.0.0.2"), s.dialFrom(t, "127.0.0.1"), s.dialFrom(t, "127.0.0.3")
	s.waitFor(t, "three newcomers waiting", func(st Stats) bool { return st.Waiting == 3 })
	// Longer than any grace the listener ever gave: a client may be
	// starved of CPU that long.
	time.Sleep(2500 * time.Millisecond)
	if closed := countClosed(held); closed > 0 {
		t.Fatalf("%d connections holding places were closed, want none", closed)
	}
	if st := s.listener.Stats(); st.Waiting != 3 || st.Closed["shed"]+st.Closed["handshake"] > 0 {
		t.Fatalf("got %+v, want 3 newcomers waiting and nothing closed", st)
	}
	for name, c := range map[string]net.Conn{"of the address at its share": own, "of the other": others, "of a third address": third} {
		if closedByServer(c) {
			t.Errorf("the newcomer %s was closed, want it waiting", name)
		}
	}

	other.Close() // a place comes free
	c := tls.Client(third, s.client)
	if err := get(c, "/"); err != nil {
		t.Errorf("the third address's newcomer once a place came free: %v, want it served first, its address holding none", err)
	}
}

func halfHeader(c net.Conn) error {
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: web")
	return err
}

// helloOnly sends its ClientHello, the first write, and then holds every
// write until stop: a handshake begun and never finished.
type helloOnly struct {
	net.Conn
	stop   <-chan struct{}
	writes atomic.Int64
}

func (c *helloOnly) Write(p []byte) (int, error) {
	if c.writes.Add(1) > 1 {
		<-c.stop
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// TestAnAddressTakesThreeQuarters: one address, even alone, holds at most
// three quarters of the places, however it uses them, so that a probe
// coming after it is served at once, not when one of its closes.
func TestAnAddressTakesThreeQuarters(t *testing.T) {
	const max = 8
	s := newTestServer(t, max)
	for range max {
		go get(tls.Client(s.dialFrom(t, "127.0.0.2"), s.client), "/block")
	}
	s.waitFor(t, "the address at its share", func(st Stats) bool { return s.blocked.Load() == max-max/4 })
	c := s.dialFrom(t, "127.0.0.3")
	c.SetDeadline(time.Now().Add(time.Second))
	if err := get(tls.Client(c, s.client), "/"); err != nil {
		t.Fatalf("a probe after one address took its share: %v, want it served at once", err)
	}
	if got := s.blocked.Load(); got != max-max/4 {
		t.Errorf("the address is served on %d connections, want %d", got, max-max/4)
	}
}

// TestStarvedHandshakeKept: a server starved of CPU in the middle of a
// TLS 1.3 handshake is late to read the client's last flight, which
// finished the handshake for the client, who may already send a request.
// Cutting the handshake at client-go's own 10 s, counted from the place
// given, closed connections the apiserver had pooled (e2e
// TestBurstServedOnBusyCores); the request is answered.
func TestStarvedHandshakeKept(t *testing.T) {
	const starved = 11 * time.Second // past client-go's TLSHandshakeTimeout
	s := newTestServerOn(t, 1, func(ln net.Listener) net.Listener { return &starvedListener{Listener: ln, delay: starved} })
	c := tls.Client(s.dialFrom(t, "127.0.0.1"), s.client)
	c.SetDeadline(time.Now().Add(patience))
	if err := c.Handshake(); err != nil {
		t.Fatalf("the client's side of the handshake: %v", err)
	}
	if err := get(c, "/"); err != nil {
		t.Errorf("a request on a connection the server was %s late to finish: %v, want it answered", starved, err)
	}
}

// starvedListener's connections are late, by delay, to read anything after
// their first read, as a server starved of CPU is.
type starvedListener struct {
	net.Listener
	delay time.Duration
}

func (l *starvedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return &starvedConn{Conn: c, delay: l.delay}, err
}

type starvedConn struct {
	net.Conn
	delay time.Duration
	reads atomic.Int64
}

func (c *starvedConn) Read(p []byte) (int, error) {
	if c.reads.Add(1) == 2 {
		time.Sleep(c.delay)
	}
	return c.Conn.Read(p)
}

// TestShedWhenTooManyWait: past MaxWaiting newcomers, the newest of the
// address with the most waiting are closed, and a newcomer of another
// address still waits its turn and is served first.
func TestShedWhenTooManyWait(t *testing.T) {
	const max = 2
	s := newTestServer(t, max)
	kept := s.tlsFrom(t, "127.0.0.3")
	if err := get(kept, "/"); err != nil {
		t.Fatal(err)
	}
	var flood []net.Conn
	for i := range max - 1 + MaxWaiting + 10 {
		flood = append(flood, s.dialFrom(t, "127.0.0.2"))
		// The kernel's accept queue holds net.core.somaxconn connections
		// (4096 here), fewer than the flood: dialed faster than the
		// listener accepts, on a busy machine, the overflow's handshakes
		// are dropped by the kernel, unknown to the client, and never
		// reach the listener. Every 256, wait until it has taken them.
		if dialed := i + 1; dialed%256 == 0 {
			s.waitFor(t, "the flood accepted", func(st Stats) bool {
				return st.Open-1+st.Waiting+int(st.Closed["shed"]) >= dialed
			})
		}
	}
	s.waitFor(t, "the newest shed", func(st Stats) bool { return st.Closed["shed"] == 10 })
	newcomer := s.dialFrom(t, "127.0.0.1")
	s.waitFor(t, "one more shed for the newcomer", func(st Stats) bool { return st.Closed["shed"] == 11 })
	if !closedByServer(flood[len(flood)-1]) || closedByServer(flood[1]) {
		t.Error("want the flood's newest shed, and its oldest waiting")
	}
	kept.Close() // a place comes free
	c := tls.Client(newcomer, s.client)
	if err := get(c, "/"); err != nil {
		t.Fatalf("a newcomer of another address: %v, want it served", err)
	}
	if got := s.listener.Stats().Closed["shed"]; got != 11 {
		t.Errorf("shed: got %d, want 11", got)
	}
}

// TestCloseClosesWaiting: Close closes the newcomers that wait and those
// in their handshake; Accept then fails.
func TestCloseClosesWaiting(t *testing.T) {
	const max = 1
	s := newTestServer(t, max)
	handshaking := s.dialFrom(t, "127.0.0.1")
	waiting := s.dialFrom(t, "127.0.0.1")
	s.waitFor(t, "one waiting", func(st Stats) bool { return st.Waiting == 1 })
	s.listener.Close()
	for name, c := range map[string]net.Conn{"handshaking": handshaking, "waiting": waiting} {
		if !closedByServer(c) {
			t.Errorf("the %s newcomer is open after Close, want it closed", name)
		}
	}
	if _, err := s.listener.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: got %v, want net.ErrClosed", err)
	}
}

// TestSilentHandshakeCounted: a client that connects and never says hello
// is closed at HandshakeTimeout, its place given back, and counted as a
// handshake that failed ("handshake"); one closed by the listener's Close
// is not counted.
func TestSilentHandshakeCounted(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, 4)
	silent, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	s.waitFor(t, "the silent client in its handshake", func(st Stats) bool { return st.Open == 1 })
	s.waitFor(t, "the silent client closed and counted", func(st Stats) bool { return st.Open == 0 && st.Closed["handshake"] == 1 })
	silent.SetReadDeadline(time.Now().Add(patience))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Error("the silent client's connection is still open, want it closed")
	}

	atClose, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer atClose.Close()
	s.waitFor(t, "a second silent client in its handshake", func(st Stats) bool { return st.Open == 1 })
	s.listener.Close()
	s.waitFor(t, "the second client closed by Close", func(st Stats) bool { return st.Open == 0 })
	if got := s.listener.Stats().Closed["handshake"]; got != 1 {
		t.Errorf("%d handshakes counted as failed, want 1: a connection that Close closed is not one", got)
	}
}
