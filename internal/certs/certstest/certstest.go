// Package certstest makes certificate authorities and certificates for
// tests, and writes them where a configuration reads them.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority that issues certificates for tests.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA returns a new authority called name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key}
}

// PEM is the authority's certificate, PEM-encoded.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Pool trusts the authority alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue returns a certificate for a server and a client called
// commonName, valid for 127.0.0.1 and localhost, and its key, both
// PEM-encoded.
func (ca *CA) Issue(t testing.TB, commonName string) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// KeyPair is Issue's certificate as tls takes it.
func (ca *CA) KeyPair(t testing.TB, commonName string) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(ca.Issue(t, commonName))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// WriteFiles issues a certificate called commonName and writes it and its
// key as tls.crt and tls.key in dir, replacing them by renaming, as a
// rotation does; it returns their paths.
func (ca *CA) WriteFiles(t testing.TB, dir, commonName string) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, commonName)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	Replace(t, keyFile, keyPEM)
	Replace(t, certFile, certPEM)
	return certFile, keyFile
}

// Replace writes data to path through a new file renamed over it: a new
// inode, as a rotation makes.
func Replace(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// MutualTLSServer starts a server serving the certificate ca issues for
// 127.0.0.1, that requires a client certificate ca issued, and notes the
// common name of each it was shown; it is closed when the test ends.
func (ca *CA) MutualTLSServer(t testing.TB) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var client atomic.Value
	down := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	down.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	down.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.KeyPair(t, "downstream")},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
	down.StartTLS()
	t.Cleanup(down.Close)
	return down, &client
}

// ServedName returns the common name of the certificate addr serves,
// verified against roots.
func ServedName(t testing.TB, addr string, roots *x509.CertPool) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}
