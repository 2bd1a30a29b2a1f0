package auth

import (
	"errors"
	"fmt"
	"strings"
)

// Environment variables read by LoadConfig. Each secret may instead be
// given as a file path in the variable with a _FILE suffix
// (CRABBOX_ADMIN_TOKEN_FILE...), as container secrets usually are.
const (
	EnvAdminToken    = "CRABBOX_ADMIN_TOKEN"
	EnvSharedToken   = "CRABBOX_SHARED_TOKEN"
	EnvSharedOwner   = "CRABBOX_SHARED_OWNER"
	EnvSessionSecret = "CRABBOX_SESSION_SECRET"
	// EnvAdminOwners is a comma-separated list of user-token owners who
	// are admins.
	EnvAdminOwners = "CRABBOX_ADMIN_OWNERS"
	EnvDefaultOrg  = "CRABBOX_DEFAULT_ORG"
)

// DefaultOrg is the org of requests that name none, unless configured.
const DefaultOrg = "default"

// LoadConfig builds a Config from environment variables through getenv
// (os.Getenv) and secret files through readFile (os.ReadFile), and
// validates it. Setting both a variable and its _FILE form is an error;
// a file's trailing newline is dropped. Errors name the variable or file,
// never a secret.
func LoadConfig(getenv func(string) string, readFile func(string) ([]byte, error)) (Config, error) {
	var c Config
	var err error
	secrets := []struct {
		name string
		dst  *string
	}{
		{EnvAdminToken, &c.AdminToken}, {EnvSharedToken, &c.SharedToken}, {EnvSessionSecret, &c.SessionSecret},
	}
	for _, s := range secrets {
		if *s.dst, err = readSecret(getenv, readFile, s.name); err != nil {
			return Config{}, err
		}
	}
	c.SharedOwner = strings.TrimSpace(getenv(EnvSharedOwner))
	for _, o := range strings.Split(getenv(EnvAdminOwners), ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.AdminOwners = append(c.AdminOwners, o)
		}
	}
	c.DefaultOrg = strings.TrimSpace(getenv(EnvDefaultOrg))
	if c.DefaultOrg == "" {
		c.DefaultOrg = DefaultOrg
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("coordinator credentials (%s, %s, %s): %w", EnvAdminToken, EnvSharedToken, EnvSessionSecret, err)
	}
	return c, nil
}

func readSecret(getenv func(string) string, readFile func(string) ([]byte, error), name string) (string, error) {
	value, path := getenv(name), getenv(name+"_FILE")
	switch {
	case value != "" && path != "":
		return "", fmt.Errorf("both %s and %s_FILE are set; use one", name, name)
	case path != "":
		b, err := readFile(path)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: read %s: %w", name, path, unwrapPath(err))
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%s_FILE: %s is empty", name, path)
		}
		return v, nil
	}
	return value, nil
}

// unwrapPath drops the path from an *fs.PathError-like error, which the
// message already names.
func unwrapPath(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
