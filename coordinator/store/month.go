package store

import "time"

// MonthStart returns the first instant of t's month in UTC.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// MonthlyReservedUSD is what lease l reserves against the monthly limits of
// the month that starts at month (see MonthStart). Registered leases reserve
// nothing. A lease that has not ended (EndedAt zero: live, or its server
// deletion still queued) reserves the larger of its MaxEstimatedUSD and its
// cost so far in every month since it was created, so a lease still
// running from last month counts this month in full. An ended lease
// reserves what it actually cost inside the month: EstimatedHourlyUSD times
// the part of [CreatedAt, EndedAt) that falls in the month.
func MonthlyReservedUSD(l Lease, month, now time.Time) float64 {
	if l.Lifecycle == LifecycleRegistered {
		return 0
	}
	end := month.AddDate(0, 1, 0)
	if !l.CreatedAt.Before(end) {
		return 0
	}
	if l.EndedAt.IsZero() {
		return max(l.MaxEstimatedUSD, l.EstimatedHourlyUSD*hours(now.Sub(l.CreatedAt)))
	}
	return l.EstimatedHourlyUSD * hours(overlap(l.CreatedAt, l.EndedAt, month, end))
}

// MonthlyRuntime is how long lease l ran inside the month that starts at
// month: the part of [CreatedAt, EndedAt) (or [CreatedAt, now) while not
// ended) that falls in the month.
func MonthlyRuntime(l Lease, month, now time.Time) time.Duration {
	stop := l.EndedAt
	if stop.IsZero() {
		stop = now
	}
	return overlap(l.CreatedAt, stop, month, month.AddDate(0, 1, 0))
}

func overlap(aStart, aEnd, bStart, bEnd time.Time) time.Duration {
	start, end := aStart, aEnd
	if bStart.After(start) {
		start = bStart
	}
	if bEnd.Before(end) {
		end = bEnd
	}
	if !end.After(start) {
		return 0
	}
	return end.Sub(start)
}

func hours(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return d.Hours()
}
