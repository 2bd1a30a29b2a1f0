//go:build unix

package main

// startBackground starts exe with args in a session of its own, so that it
// outlives this process, without waiting for it; its diagnostics go to
// logFile.
func startBackground(exe string, args []string, logFile string) error {
	cmd, err := startDetached(exe, args, logFile, nil)
	if err != nil {
		return err
	}
	return cmd.Process.Release()
}
