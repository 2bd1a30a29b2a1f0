// Package units writes sizes and durations as people read them, in the
// one form every crabbox message and table uses.
package units

import (
	"fmt"
	"time"
)

// Bytes writes n bytes in the largest binary unit that keeps it at 1 or
// more, with one decimal: "512 B", "1.5 KiB", "20.0 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Duration writes d in its largest whole unit, as people say it: "1h",
// "90m", "45s"; d.String() when no unit divides it.
func Duration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
