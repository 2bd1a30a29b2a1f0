package e2b

import (
	"strconv"
	"strings"
)

// linuxSignals are the descriptions Go gives Linux signals, as envd
// reports a command ended by one in its end event's status ("signal:
// killed"), by number.
var linuxSignals = map[string]int{
	"hangup": 1, "interrupt": 2, "quit": 3, "illegal instruction": 4,
	"trace/breakpoint trap": 5, "aborted": 6, "bus error": 7, "floating point exception": 8,
	"killed": 9, "user defined signal 1": 10, "segmentation fault": 11, "user defined signal 2": 12,
	"broken pipe": 13, "alarm clock": 14, "terminated": 15, "stack fault": 16,
	"child exited": 17, "continued": 18, "stopped (signal)": 19, "stopped": 20,
	"stopped (tty input)": 21, "stopped (tty output)": 22, "urgent I/O condition": 23,
	"CPU time limit exceeded": 24, "file size limit exceeded": 25, "virtual timer expired": 26,
	"profiling timer expired": 27, "window changed": 28, "I/O possible": 29,
	"power failure": 30, "bad system call": 31,
}

// signalNumber reads the signal out of an end event's status: "signal:
// killed", "signal: aborted (core dumped)" or, for signals without a
// description, "signal: signal 34".
func signalNumber(status string) (int, bool) {
	name, ok := strings.CutPrefix(status, "signal: ")
	if !ok {
		return 0, false
	}
	name = strings.TrimSuffix(name, " (core dumped)")
	if n, ok := linuxSignals[name]; ok {
		return n, true
	}
	if num, ok := strings.CutPrefix(name, "signal "); ok {
		if n, err := strconv.Atoi(num); err == nil && n > 0 && n < 128 {
			return n, true
		}
	}
	return 0, false
}
