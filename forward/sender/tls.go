package sender

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd/internal/certs"
)

// RouteTLS is a route's TLS beyond the system's defaults. Its files are
// PEM, read again when they change (package certs).
type RouteTLS struct {
	// CAFile, when set, holds the only CAs trusted for the downstream's
	// certificate, in place of the system's roots: a route to an internal
	// service trusts its private CA, and no certificate a public CA issued
	// for the same name.
	CAFile string
	// CertFile and KeyFile are the client certificate presented to a
	// downstream that asks for one (mutual TLS).
	CertFile, KeyFile string
	// ServerName is the name the downstream's certificate must hold, sent
	// as SNI; the URL's host when empty.
	ServerName string
}

// clientTLS returns the TLS configuration of each new connection to u.
// Verification is Go's own, always on, against the roots of the moment:
// a reloaded CA bundle is a new pool, and a tls.Config must not change
// once in use, so each connection gets a copy of the configuration with
// the current pool rather than one configuration whose roots change under
// the handshakes using it. The client certificate is asked for at each
// handshake (GetClientCertificate), and is the current one too.
func (f *Forwarder) clientTLS(u *url.URL, rt *RouteTLS) (func() *tls.Config, error) {
	base := &tls.Config{}
	if f.tlsConfig != nil {
		base = f.tlsConfig.Clone()
	}
	if rt != nil && rt.ServerName != "" {
		base.ServerName = rt.ServerName
	}
	if base.ServerName == "" {
		base.ServerName = u.Hostname()
	}
	fixed := func() *tls.Config { return base }
	if rt == nil {
		return fixed, nil
	}
	logger := f.Logger.With(zap.String("url", u.Redacted()))
	if rt.CertFile != "" {
		pair, err := certs.NewKeyPair(rt.CertFile, rt.KeyFile, logger)
		if err != nil {
			return nil, tlsFileError(err)
		}
		base.GetClientCertificate = pair.GetClientCertificate
	}
	if rt.CAFile == "" {
		return fixed, nil
	}
	roots, err := certs.NewPool(rt.CAFile, logger)
	if err != nil {
		return nil, tlsFileError(err)
	}
	return func() *tls.Config {
		c := base.Clone()
		c.RootCAs = roots.CertPool()
		return c
	}, nil
}

// tlsFileError names the route's field of a file that cannot serve.
func tlsFileError(err error) error {
	var fe *certs.FileError
	if errors.As(err, &fe) {
		return fmt.Errorf("tls.%s: %s: %w", fe.Field, fe.Path, fe.Err)
	}
	return err
}
