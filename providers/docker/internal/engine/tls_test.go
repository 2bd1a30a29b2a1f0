package engine

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key, PEM-encoded, for a server on
// 127.0.0.1 or for a client.
func (ca testCA) issue(t *testing.T, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// tlsEngine serves f over TLS on 127.0.0.1, asking for a client
// certificate of ca, and returns its tcp:// address.
func tlsEngine(t *testing.T, f *fakeEngine, ca testCA) string {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, x509.ExtKeyUsageServerAuth)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv := httptest.NewUnstartedServer(f)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return "tcp://" + srv.Listener.Addr().String()
}

// certDir writes ca.pem, cert.pem and key.pem as DOCKER_CERT_PATH holds
// them.
func certDir(t *testing.T, caPEM, certPEM, keyPEM []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.pem": caPEM, "cert.pem": certPEM, "key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// With DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, the client checks the
// engine against ca.pem and shows cert.pem, for requests and attaches.
func TestTLS(t *testing.T) {
	ca := newCA(t)
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/attach") {
			attachHandler(t, http.StatusSwitchingProtocols)(w, r)
			return
		}
		answerJSON(w, http.StatusOK, `{"Os":"linux"}`)
	}}
	host := tlsEngine(t, f, ca)
	certPEM, keyPEM := ca.issue(t, x509.ExtKeyUsageClientAuth)
	dir := certDir(t, ca.pem, certPEM, keyPEM)
	env := map[string]string{"DOCKER_HOST": host, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": dir}
	c := newClient(t, ConfigFromEnv(func(k string) string { return env[k] }))
	if v, err := c.ServerVersion(t.Context()); err != nil || v.Os != "linux" {
		t.Fatalf("ServerVersion over TLS = %+v, %v", v, err)
	}
	testAttach(t, c)

	// An engine whose certificate another CA signed is refused.
	other := newCA(t)
	dir2 := certDir(t, other.pem, certPEM, keyPEM)
	c2 := newClient(t, Config{Host: host, CertPath: dir2, TLSVerify: true})
	_, err := c2.ServerVersion(t.Context())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("ServerVersion with the wrong CA: err = %v, want a certificate error", err)
	}
}
