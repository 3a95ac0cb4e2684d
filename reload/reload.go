// Package reload keeps a value parsed from files, such as a key pair or a
// CA pool, current as the files change. It reads the files' content rather
// than watching them: a Secret volume changes by swapping a ..data
// symlink, which a watch on one file's inode misses, and reading a few
// small files costs nothing. It knows nothing of what the files hold: the
// caller parses them, and says when to look.
package reload

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Files is a value parsed from files, replaced when their content changes.
// Readers get the last value that parsed. I is what a parse finds besides
// the value, such as what to log about it.
type Files[T, I any] struct {
	what  string // names the value in errors: "serving certificate"
	files []string
	parse func(contents [][]byte) (*T, I, error)

	current atomic.Pointer[T]

	mu      sync.Mutex
	lastSum [sha256.Size]byte // of the content last tried, good or bad
}

// New returns the value parse makes of the contents of files, in order,
// once Load has loaded it.
func New[T, I any](what string, parse func(contents [][]byte) (*T, I, error), files ...string) *Files[T, I] {
	return &Files[T, I]{what: what, files: files, parse: parse}
}

// Get returns the current value, nil before the first good Load.
func (f *Files[T, I]) Get() *T { return f.current.Load() }

// Load reads the files and, when they differ from the last read, parses
// them, replaces the current value and returns what the parse found. Each
// distinct state of the files, unreadable included, is tried once, so a
// bad change is reported once, not at every poll. changed reports whether
// a new state was seen.
//
// A read that does not parse is read again, and parsed again if it
// changed, a few times at most: the files may have changed between the
// reads of one and the next, as when kubelet swaps a Secret volume's
// ..data between the reads of tls.crt and tls.key.
func (f *Files[T, I]) Load() (changed bool, info I, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	contents, sum, readErr := f.read()
	if sum == f.lastSum {
		return false, info, nil
	}
	v, info, err := f.parseRead(contents, readErr)
	for range maxRereads {
		if err == nil {
			break
		}
		again, againSum, againErr := f.read()
		if againSum == sum {
			break
		}
		sum = againSum
		v, info, err = f.parseRead(again, againErr)
	}
	f.lastSum = sum
	if err != nil {
		return true, info, err
	}
	f.current.Store(v)
	return true, info, nil
}

// maxRereads is how many times Load reads files that did not parse again.
const maxRereads = 3

// read returns the files' contents and their sum; or, for a file that
// cannot be read, the error and a sum of the contents before it and of
// the error.
func (f *Files[T, I]) read() (contents [][]byte, sum [sha256.Size]byte, err error) {
	contents = make([][]byte, len(f.files))
	h := sha256.New()
	for i, name := range f.files {
		if contents[i], err = os.ReadFile(name); err != nil {
			h.Write([]byte(err.Error()))
			break
		}
		h.Write(contents[i])
		h.Write([]byte{0}) // so moving bytes from one file to the next is a change
	}
	h.Sum(sum[:0])
	return contents, sum, err
}

// parseRead parses what read returned, and says which files did not read or
// parse.
func (f *Files[T, I]) parseRead(contents [][]byte, readErr error) (*T, I, error) {
	if readErr != nil {
		var none I
		return nil, none, fmt.Errorf("reading the %s: %w", f.what, readErr)
	}
	v, info, err := f.parse(contents)
	if err != nil {
		return nil, info, fmt.Errorf("the %s in %v does not load: %w", f.what, f.files, err)
	}
	return v, info, nil
}

// Poll calls reload every interval, and on SIGHUP after calling hup, until
// the stop it returns is called; stop returns once reload has.
func Poll(interval time.Duration, hup, reload func()) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	go func() {
		defer close(stopped)
		defer signal.Stop(sig)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-sig:
				hup()
			case <-tick.C:
			}
			reload()
		}
	}()
	return func() { close(done); <-stopped }
}
