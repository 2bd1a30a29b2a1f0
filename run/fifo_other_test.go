//go:build !unix

package run_test

import "testing"

func makeFIFO(t *testing.T) string {
	t.Skip("needs a FIFO")
	return ""
}
