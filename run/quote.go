package run

import "github.com/crabbox-dev/crabbox/internal/remote"

// Quote quotes word as one word of a POSIX shell command line: the shell
// reads it back as exactly word, with nothing expanded. Words made only of
// characters that are never special to sh (letters, digits and _@%+:,./-)
// come back unchanged; anything else is wrapped in single quotes, where an
// embedded single quote closes them, adds an escaped quote and reopens
// them.
//
// Use it to build the command of OpenSSH's `ssh host 'command'` (or of an
// x/crypto/ssh Session.Run): the SSH server hands that string to the remote
// user's login shell, which parses it, so every word of it must be quoted
// for that shell. The quoting is for POSIX shells (sh, bash, dash, ash,
// zsh); csh and tcsh read some quoted words (with ! or a newline)
// differently. No quoting carries a NUL byte, which no command-line
// argument can hold.
//
//	Quote("it's")  == `'it'\''s'`
//	Quote("")      == `''`
//	Quote("a/b.c") == `a/b.c`
func Quote(word string) string { return remote.Quote(word) }

// QuoteCommand quotes argv into a POSIX shell command line that runs
// argv[0] with the remaining words as its arguments, each passed through
// exactly (see Quote). A command name spelled like a shell reserved word
// ("if", "time", ...) is quoted so that it runs as a command. Empty argv
// gives an empty line.
//
//	exec.Command("ssh", host, run.QuoteCommand([]string{"ls", "-l", "my dir"}))
//
// runs `ls -l 'my dir'` on host: ssh passes the line to the remote shell,
// which splits it back into ls, -l and "my dir".
func QuoteCommand(argv []string) string { return remote.CommandLine(argv) }
