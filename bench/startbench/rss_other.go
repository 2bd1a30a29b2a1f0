//go:build !linux

package main

import "os"

// maxRSS is unavailable here: startbench reads the peak resident set size
// only where its unit is known to be KiB (Linux).
func maxRSS(*os.ProcessState) int64 { return -1 }
