//go:build unix

package main

// startConnHold starts `exe connhold --socket socket id` in a session of its own,
// so that it outlives this process, without waiting for it: this process
// has its own connection, and the next one finds the shared one. Its
// diagnostics go to socket.log.
func startConnHold(exe, id, socket string) error {
	cmd, err := startDetached(exe, []string{"connhold", "--socket", socket, id}, socket+".log", nil)
	if err != nil {
		return err
	}
	return cmd.Process.Release()
}
