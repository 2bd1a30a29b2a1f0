package external

// CheckLeaseForTest exposes checkLease to the fuzz targets.
func CheckLeaseForTest(l *Lease, needSSH bool) error {
	return checkLease("lease", l, expect{ssh: needSSH})
}
