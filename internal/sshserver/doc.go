// Package sshserver is crabbox's own SSH server: it makes the machine it runs
// on a box.
//
// The local provider runs it in-process on a loopback listener (tests and
// library users need no binary and nothing installed), and `crabbox agent`
// runs the same server inside Docker containers. It speaks just enough of the
// SSH connection protocol to behave like OpenSSH's sshd for what crabbox's
// clients use, so the run and sync packages work unchanged against it and
// against a real sshd:
//
//   - public-key authentication against a small set of authorized keys
//     (a lease key, and a coordinator's access key), and optionally one
//     user name; no passwords, no agent or port forwarding; an
//     authenticated client may replace the keys for new connections with
//     the global request SetKeyRequest or SetKeysRequest (a ready pool's
//     handover, an owner installing its coordinator's access key);
//   - "session" channels with env, pty-req, window-change, exec, shell and
//     signal requests; subsystems are rejected;
//   - every command runs as `Shell -c <command>` in its own process group in
//     Config.Dir, with stdin, stdout and stderr streamed over the channel;
//   - the end of a command is reported with exit-status or exit-signal after
//     all of its output has been sent, so that x/crypto/ssh's Session.Wait
//     returns the same *ssh.ExitError as with sshd;
//   - when a client closes the session or disconnects while its command runs,
//     or the server is closed, the whole process group is terminated (SIGTERM,
//     then SIGKILL after a short grace), so nothing is left running on the box;
//   - connection-level ("global") requests such as "touch@crabbox.dev" are
//     handed to the handlers in Config.Requests.
//
// Boxes are Linux first. The package also builds on macOS, and on Windows
// without process groups or pseudo-terminals.
package sshserver
