package promtext

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime/metrics"
	"strconv"
)

// WriteProcess writes the series every Go exporter has, under their
// standard names and help texts (client_golang's process and Go
// collectors): resident memory, open file descriptors and start time from
// /proc/self, and goroutines from runtime/metrics. On a system without
// /proc the process series are left out, not written as zeros.
func WriteProcess(w io.Writer) {
	if stat, err := readProcStat(); err == nil {
		Family(w, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
		Sample(w, "process_resident_memory_bytes", "", float64(stat.residentPages*int64(os.Getpagesize())))
		if boot, err := bootTime(); err == nil {
			Family(w, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
			Sample(w, "process_start_time_seconds", "", float64(boot)+float64(stat.startTicks)/userHZ)
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		Family(w, "process_open_fds", "gauge", "Number of open file descriptors.")
		// ReadDir opened one descriptor of its own, closed by now.
		Sample(w, "process_open_fds", "", float64(len(fds)-1))
	}
	sample := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		Family(w, "go_goroutines", "gauge", "Number of goroutines that currently exist.")
		Sample(w, "go_goroutines", "", float64(sample[0].Value.Uint64()))
	}
}

// userHZ is the unit of the times in /proc/<pid>/stat: clock ticks of
// sysconf(_SC_CLK_TCK), which Linux fixes at 100 for user space on every
// architecture (client_golang's procfs assumes the same).
const userHZ = 100

type procStat struct {
	startTicks    int64 // field 22: start time, in clock ticks after boot
	residentPages int64 // field 24: resident set size, in pages
}

// readProcStat reads /proc/self/stat (proc(5)).
func readProcStat() (procStat, error) {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procStat{}, err
	}
	// Field 2, the command, is in parentheses and may hold spaces and
	// parentheses of its own: the fields that follow start after the last
	// ')', with field 3.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return procStat{}, errors.New("/proc/self/stat: no command field")
	}
	fields := bytes.Fields(raw[i+1:])
	const first = 3
	if len(fields) < 24-first+1 {
		return procStat{}, errors.New("/proc/self/stat: too few fields")
	}
	start, err1 := strconv.ParseInt(string(fields[22-first]), 10, 64)
	rss, err2 := strconv.ParseInt(string(fields[24-first]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStat{}, err
	}
	return procStat{startTicks: start, residentPages: rss}, nil
}

// bootTime reads the btime line of /proc/stat: when the system booted, in
// Unix seconds.
func bootTime() (int64, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(raw) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, errors.New("/proc/stat has no btime line")
}
