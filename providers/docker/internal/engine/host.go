package engine

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Config says where the engine is and how to talk to it.
type Config struct {
	// Host is the engine's address in the form of DOCKER_HOST:
	// unix:///path, tcp://host:port, http(s)://host:port or, on Windows,
	// npipe:////./pipe/name. Empty means DefaultHost.
	Host string
	// CertPath is a directory holding ca.pem, cert.pem and key.pem. When
	// set, a tcp engine is spoken to over TLS with cert.pem and key.pem as
	// the client's certificate.
	CertPath string
	// TLSVerify checks the engine's certificate against ca.pem (or the
	// system's roots when CertPath is empty). Without it, TLS with a
	// CertPath does not check who the engine is, as the docker CLI does.
	TLSVerify bool
	// APIVersion fixes the API version of every request (e.g. "1.47").
	// Empty means the client asks the engine once, on its first request.
	APIVersion string
}

// ConfigFromEnv reads the environment the docker CLI reads: DOCKER_HOST,
// DOCKER_TLS_VERIFY, DOCKER_CERT_PATH (by default ~/.docker when
// DOCKER_TLS_VERIFY is set) and DOCKER_API_VERSION. getenv is usually
// os.Getenv.
func ConfigFromEnv(getenv func(string) string) Config {
	cfg := Config{
		Host:       getenv("DOCKER_HOST"),
		CertPath:   getenv("DOCKER_CERT_PATH"),
		TLSVerify:  getenv("DOCKER_TLS_VERIFY") != "",
		APIVersion: getenv("DOCKER_API_VERSION"),
	}
	if cfg.TLSVerify && cfg.CertPath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cfg.CertPath = filepath.Join(home, ".docker")
		}
	}
	return cfg
}

// ParseHost parses an engine address in the form of DOCKER_HOST. The
// result's Scheme is unix, npipe, tcp, http or https; its Host is the
// socket's path, the pipe's name or host[:port]; its Path is an API base
// path (tcp and http(s) only).
func ParseHost(host string) (*url.URL, error) {
	scheme, addr, ok := strings.Cut(host, "://")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("docker host %q: want scheme://address, e.g. unix:///var/run/docker.sock or tcp://127.0.0.1:2375", host)
	}
	switch scheme {
	case "unix", "npipe":
		if addr == "" {
			return nil, fmt.Errorf("docker host %q: the %s address is empty", host, scheme)
		}
		return &url.URL{Scheme: scheme, Host: addr}, nil
	case "tcp", "http", "https":
		u, err := url.Parse("tcp://" + addr)
		if err != nil {
			return nil, fmt.Errorf("docker host %q: %w", host, err)
		}
		if u.Host == "" || u.Hostname() == "" {
			return nil, fmt.Errorf("docker host %q: no host name", host)
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("docker host %q: want only host[:port] and a path", host)
		}
		return &url.URL{Scheme: scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/")}, nil
	}
	return nil, fmt.Errorf("docker host %q: scheme %q is not supported: set DOCKER_HOST (or the provider's host) to a unix://, tcp://, http(s):// or npipe:// address", host, scheme)
}

// endpoint is a parsed Config: how to dial the engine and what URLs to ask.
type endpoint struct {
	host    string      // the engine's address, as given (for messages)
	network string      // "unix", "tcp" or "npipe"
	addr    string      // what to dial
	tls     *tls.Config // nil for plain HTTP
	base    url.URL     // scheme, host and base path of every request
}

func newEndpoint(cfg Config) (endpoint, error) {
	if cfg.Host == "" {
		cfg.Host = DefaultHost
	}
	u, err := ParseHost(cfg.Host)
	if err != nil {
		return endpoint{}, err
	}
	e := endpoint{host: cfg.Host, addr: u.Host, base: url.URL{Scheme: "http", Host: "docker-engine"}}
	switch u.Scheme {
	case "unix":
		e.network = "unix"
	case "npipe":
		if !pipesSupported {
			return endpoint{}, fmt.Errorf("docker host %q: named pipes exist only on Windows", cfg.Host)
		}
		e.network = "npipe"
	default:
		e.network = "tcp"
		useTLS := u.Scheme == "https" || cfg.CertPath != "" || cfg.TLSVerify
		if useTLS {
			if e.tls, err = tlsConfig(cfg, u.Hostname()); err != nil {
				return endpoint{}, err
			}
		}
		if u.Port() == "" {
			port := "2375"
			if useTLS {
				port = "2376"
			}
			e.addr = net.JoinHostPort(u.Hostname(), port)
		}
		e.base = url.URL{Scheme: "http", Host: e.addr, Path: u.Path}
		if useTLS {
			e.base.Scheme = "https"
		}
	}
	return e, nil
}

// tlsConfig is the TLS configuration for an engine named serverName.
func tlsConfig(cfg Config, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: !cfg.TLSVerify && cfg.CertPath != ""} // unverified only as DOCKER_TLS_VERIFY asks
	if cfg.CertPath == "" {
		return c, nil
	}
	ca, err := os.ReadFile(filepath.Join(cfg.CertPath, "ca.pem"))
	switch {
	case err == nil:
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("docker TLS: %s holds no PEM certificate", filepath.Join(cfg.CertPath, "ca.pem"))
		}
	case cfg.TLSVerify || !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("docker TLS (DOCKER_CERT_PATH): %w", err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(cfg.CertPath, "cert.pem"), filepath.Join(cfg.CertPath, "key.pem"))
	switch {
	case err == nil:
		c.Certificates = []tls.Certificate{cert}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("docker TLS client certificate (DOCKER_CERT_PATH): %w", err)
	}
	return c, nil
}
