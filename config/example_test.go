package config_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/config"
	_ "github.com/crabbox-dev/crabbox/providers/ssh" // a program imports the providers it offers
)

// A program embedding crabbox honours the user's settings: the config file,
// CRABBOX_* variables and its own flags, with the CLI's precedence. A real
// program passes os.Environ(); this one injects its environment and config
// file so that it runs anywhere, offline.
func Example() {
	dir, err := os.MkdirTemp("", "crabbox-config-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "config")
	if err := os.WriteFile(file, []byte("provider ssh\nssh-host build.example\nssh-user ci\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	env := []string{
		"CRABBOX_CONFIG=" + file,
		"CRABBOX_SSH_USER=robot", // the environment wins over the file
		"CRABBOX_STATE_DIR=" + filepath.Join(dir, "state"),
	}

	settings, err := config.Load(config.Options{
		Env:   env,                                   // os.Environ() in a real program
		Flags: map[string]string{"ssh-port": "2222"}, // the program's own flags win
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("provider:", settings.Provider.Value, "from", settings.Provider.Source)
	for _, key := range []string{"ssh-host", "ssh-user", "ssh-port"} {
		v := settings.Values[key]
		fmt.Printf("%s: %s from %s\n", key, v.Value, v.Source)
	}

	client, err := crabbox.New(settings.ClientOptions()...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	// client.Run(ctx, crabbox.RunRequest{...}) now leases from build.example.

	// Output:
	// provider: ssh from file
	// ssh-host: build.example from file
	// ssh-user: robot from env
	// ssh-port: 2222 from flag
}
