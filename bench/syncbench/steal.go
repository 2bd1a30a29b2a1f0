//go:build unix

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the machine's CPU times from /proc/stat's "cpu" line, in
// clock ticks: all of them, and the part a hypervisor took for other
// guests (steal), which no tool here used but which stretches every
// timing taken while it happens.
type cpuTimes struct {
	total, steal uint64
	ok           bool
}

// readCPUTimes reads /proc/stat; ok is false where there is none (macOS,
// the BSDs) or it has no steal column (kernels before 2.6.11).
func readCPUTimes() cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	return parseCPUTimes(string(data))
}

func parseCPUTimes(stat string) cpuTimes {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	// Guest time, after steal, is already in user and nice.
	t := cpuTimes{ok: true}
	for _, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += v
		t.steal = v // the last of them
	}
	return t
}

// stolen describes the share of CPU time stolen between before and after.
func stolen(before, after cpuTimes) string {
	if !before.ok || !after.ok || after.total <= before.total {
		return "unknown"
	}
	pct := 100 * float64(after.steal-before.steal) / float64(after.total-before.total)
	return fmt.Sprintf("%.1f%%", pct)
}
