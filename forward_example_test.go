package crabbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/crabbox-dev/crabbox"
)

// A web server on the box, reached from this machine through a forward.
// (The local provider's box is this machine, so a server listening on its
// loopback is on the box.)
func ExampleLease_Forward() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "crabbox-state-")
	defer os.RemoveAll(state)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the box")
	})}
	go web.Serve(ln)
	defer web.Close()

	client, err := crabbox.New(crabbox.WithStateDir(state))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	box, err := client.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer box.Release(ctx)

	// Port 0: any free local port; Addr says which.
	fwd, err := box.Forward(ctx, crabbox.ForwardSpec{LocalAddr: "127.0.0.1:0", RemotePort: ln.Addr().(*net.TCPAddr).Port})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fwd.Close()
	resp, err := http.Get("http://" + fwd.Addr().String() + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: hello from the box
}
