package api

// GET /v1/leases/{id}/terminal upgrades to a websocket carrying a shell
// on the lease's box (a pty, TERM=xterm-256color, a login shell started
// in the lease's work directory when it is on the box). The query's cols
// and rows give the terminal's first size (default DefaultTerminalCols x
// DefaultTerminalRows, at most MaxTerminalCols x MaxTerminalRows).
//
// Binary messages carry terminal bytes both ways: the client sends what
// the user typed (keys as a terminal encodes them, UTF-8 text), the
// coordinator sends the shell's output as it comes. Text messages are
// JSON TerminalMessage values: the client sends "resize"; the coordinator
// sends "exit" when the shell ends (then closes the socket normally) and
// "error" when it cannot open the shell or ends the terminal for another
// reason (then closes the socket).

// Terminal message types.
const (
	// TerminalResize (client to coordinator): the terminal is now Cols x
	// Rows characters.
	TerminalResize = "resize"
	// TerminalExit (coordinator to client): the shell ended with Code
	// (128+n when killed by signal n).
	TerminalExit = "exit"
	// TerminalError (coordinator to client): Message says why there is
	// no shell, or why it ended.
	TerminalError = "error"
)

// TerminalMessage is a JSON text message of the terminal websocket.
type TerminalMessage struct {
	Type    string `json:"type"`
	Cols    int    `json:"cols,omitempty"`
	Rows    int    `json:"rows,omitempty"`
	Code    *int   `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Terminal sizes.
const (
	DefaultTerminalCols = 80
	DefaultTerminalRows = 24
	MaxTerminalCols     = 1000
	MaxTerminalRows     = 500
)

// MaxTerminalMessageBytes bounds one message a terminal client sends.
const MaxTerminalMessageBytes = 64 << 10
