// Package certs reads TLS certificates, keys and CA bundles from files,
// and reads them again when the files change: cert-manager and Kubernetes
// rotate a certificate by replacing its files (a symbolic link swapped to
// a new directory), and a running webhookd picks the new one up on its
// next handshake, without a restart.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// checkEvery bounds how often the files are looked at: a handshake looks
// at them at most once a second, whatever the rate of handshakes.
const checkEvery = time.Second

// FileError is a file that cannot serve: unreadable, not PEM, or not
// matching its pair. Field names the file's role in the configuration:
// cert_file, key_file or ca_file.
type FileError struct {
	Field string
	Path  string
	Err   error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s %s: %v", e.Field, e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// ReadKeyPair reads a certificate, with its chain, and its private key.
func ReadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &FileError{Field: "cert_file", Path: certFile, Err: cause(err)}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &FileError{Field: "key_file", Path: keyFile, Err: cause(err)}
	}
	// Checked alone first, so that a problem of the certificate is not
	// reported as one of the key.
	if !hasCertificate(certPEM) {
		return nil, &FileError{Field: "cert_file", Path: certFile, Err: errors.New("holds no PEM certificate")}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Field: "key_file", Path: keyFile, Err: err}
	}
	return &pair, nil
}

// cause is what a failed read of a file says, without the path, which
// FileError names.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// hasCertificate says whether pemData holds a certificate x509 can parse.
func hasCertificate(pemData []byte) bool {
	return x509.NewCertPool().AppendCertsFromPEM(pemData)
}

// ReadPool reads a bundle of CA certificates.
func ReadPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, &FileError{Field: "ca_file", Path: caFile, Err: cause(err)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &FileError{Field: "ca_file", Path: caFile, Err: errors.New("holds no PEM certificate")}
	}
	return pool, nil
}

// KeyPair is a certificate and its key, read again when their files
// change. A new pair that cannot be read is logged, and the pair read
// last serves on.
type KeyPair struct{ r *reloader[*tls.Certificate] }

// NewKeyPair reads the pair; it fails as ReadKeyPair does.
func NewKeyPair(certFile, keyFile string, logger *zap.Logger) (*KeyPair, error) {
	r, err := newReloader(func() (*tls.Certificate, error) { return ReadKeyPair(certFile, keyFile) }, logger, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &KeyPair{r}, nil
}

// Certificate returns the pair to present now.
func (k *KeyPair) Certificate() *tls.Certificate { return k.r.get() }

// GetCertificate is tls.Config's, for a server.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetClientCertificate is tls.Config's, for a client.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// Pool is a bundle of CA certificates, read again when its file changes;
// a new bundle that cannot be read is logged, and the bundle read last
// serves on.
type Pool struct{ r *reloader[*x509.CertPool] }

// NewPool reads the bundle; it fails as ReadPool does.
func NewPool(caFile string, logger *zap.Logger) (*Pool, error) {
	r, err := newReloader(func() (*x509.CertPool, error) { return ReadPool(caFile) }, logger, caFile)
	if err != nil {
		return nil, err
	}
	return &Pool{r}, nil
}

// CertPool returns the bundle to trust now.
func (p *Pool) CertPool() *x509.CertPool { return p.r.get() }

// reloader holds what read returns, and calls it again when one of files
// has changed: another file (a new inode, as a rename or a symbolic link
// swap makes), another modification time or another size.
type reloader[T any] struct {
	files  []string
	read   func() (T, error)
	logger *zap.Logger
	every  time.Duration
	now    func() time.Time

	mu      sync.Mutex
	current T
	seen    []os.FileInfo // of files, as last read or tried; nil where Stat failed
	checked time.Time
}

func newReloader[T any](read func() (T, error), logger *zap.Logger, files ...string) (*reloader[T], error) {
	r := &reloader[T]{files: files, read: read, logger: logger, every: checkEvery, now: time.Now}
	r.seen = r.stat()
	v, err := read()
	if err != nil {
		return nil, err
	}
	r.current, r.checked = v, r.now()
	return r, nil
}

func (r *reloader[T]) stat() []os.FileInfo {
	infos := make([]os.FileInfo, len(r.files))
	for i, f := range r.files {
		infos[i], _ = os.Stat(f)
	}
	return infos
}

// get returns the value read last, after reading the files again if they
// changed since, at most once every r.every. Files that fail to read are
// logged once, and tried again when they change again.
func (r *reloader[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < r.every {
		return r.current
	}
	r.checked = now
	infos := r.stat()
	if same(infos, r.seen) {
		return r.current
	}
	r.seen = infos
	v, err := r.read()
	if err != nil {
		r.logger.Error("TLS files changed and cannot be read: the certificates read before serve on until they are fixed", zap.Strings("files", r.files), zap.Error(err))
		return r.current
	}
	r.current = v
	r.logger.Info("TLS files changed: reloaded", zap.Strings("files", r.files))
	return r.current
}

func same(a, b []os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size():
			return false
		}
	}
	return true
}
