package promtext

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestLabelEscaping(t *testing.T) {
	var b bytes.Buffer
	c := NewCounterVec("a")
	c.Add(1, "back\\slash \"quoted\"\nnewline")
	c.Write(&b, "x_total")
	if want := `x_total{a="back\\slash \"quoted\"\nnewline"} 1` + "\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestHistogramIsCumulative(t *testing.T) {
	h := NewHistogramVec([]float64{0.1, 1}, "route")
	for _, s := range []float64{0.05, 0.5, 0.5, 5} {
		h.Observe(s, "/x")
	}
	var b bytes.Buffer
	h.Write(&b, "x_seconds")
	want := `x_seconds_bucket{route="/x",le="0.1"} 1
x_seconds_bucket{route="/x",le="1"} 3
x_seconds_bucket{route="/x",le="+Inf"} 4
x_seconds_sum{route="/x"} 6.05
x_seconds_count{route="/x"} 4
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestProcess checks the process series against what the test process
// knows of itself.
func TestProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here: the process series are left out")
	}
	var b bytes.Buffer
	WriteProcess(&b)
	value := func(name string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(b.String())
		if m == nil {
			t.Fatalf("no %s in\n%s", name, b.String())
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if rss := value("process_resident_memory_bytes"); rss < 1<<20 || rss > 1<<32 {
		t.Errorf("process_resident_memory_bytes = %v, want a test binary's few MiB", rss)
	}
	// Opening a file shows as one more descriptor.
	before := value("process_open_fds")
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b.Reset()
	WriteProcess(&b)
	if after := value("process_open_fds"); after != before+1 {
		t.Errorf("process_open_fds went from %v to %v with one more file open, want one more", before, after)
	}
	if start := value("process_start_time_seconds"); time.Since(time.Unix(int64(start), 0)) > time.Hour || start > float64(time.Now().Unix())+1 {
		t.Errorf("process_start_time_seconds = %v, want this test's start (%v)", start, time.Now().Unix())
	}
	if g := value("go_goroutines"); g < 1 {
		t.Errorf("go_goroutines = %v, want at least this one", g)
	}
}

func TestCodeLabel(t *testing.T) {
	for _, code := range []int{-1, 0, 200, 429, 599, 600, 1000} {
		if got, want := CodeLabel(code), strconv.Itoa(code); got != want {
			t.Errorf("CodeLabel(%d): got %q, want %q", code, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CodeLabel(200) }); n != 0 {
		t.Errorf("CodeLabel(200) allocated %v times, want 0", n)
	}
}
