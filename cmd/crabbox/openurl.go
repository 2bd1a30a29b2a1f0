package main

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
)

// openURL opens u with the desktop's handler for it (the browser for
// http(s), the VNC viewer for vnc://). u carries no secret: it is in
// the opener's arguments.
func openURL(ctx context.Context, u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.CommandContext(ctx, "open", u)
	case "windows":
		cmd = exec.CommandContext(ctx, "rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.CommandContext(ctx, "xdg-open", u)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("open %s: %w", u, err)
	}
	return nil
}
