package contain

import (
	"strconv"
	"strings"
)

// Stat is what den reads of a process's /proc/PID/stat.
type Stat struct {
	State byte  // R, S, D, Z, X, ...
	PPID  int32 // parent
	// Start is when the process started, in clock ticks since boot: with
	// the pid, it tells a process from a later one that reuses the pid.
	Start int64
	// UTime, STime: its own CPU; CUTime, CSTime: that of the children it
	// reaped. In clock ticks (USER_HZ).
	UTime, STime, CUTime, CSTime int64
	RSSPages                     int64
}

// ReadStat reads /proc/PID/stat; false when the process is gone or the
// line cannot be read.
func ReadStat(pid int32) (Stat, bool) {
	var buf []byte
	b, err := readProc("/proc/"+strconv.Itoa(int(pid))+"/stat", &buf)
	if err != nil {
		return Stat{}, false
	}
	return parseStat(b)
}

// parseStat parses a /proc/PID/stat line.
func parseStat(b []byte) (Stat, bool) {
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 || len(f[0]) == 0 {
		return Stat{}, false
	}
	num := func(n int) int64 {
		v, _ := strconv.ParseInt(f[n-3], 10, 64)
		return v
	}
	return Stat{State: f[0][0], PPID: int32(num(4)), Start: num(22),
		UTime: num(14), STime: num(15), CUTime: num(16), CSTime: num(17), RSSPages: num(24)}, true
}

// Exited reports whether the process has exited: a zombie, or dead.
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }
