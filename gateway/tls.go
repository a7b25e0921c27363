package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/internal/certs"
)

// endpoint is one listener as the configuration sets it: its field, for
// errors, its address, and its certificate when it serves TLS.
type endpoint struct {
	field string // listen or admin.listen
	addr  string
	tls   *configs.TLS
	// tlsField is the YAML path of tls, for errors: tls or admin.tls.
	tlsField string
}

func publicEndpoint(addr string, t *configs.TLS) endpoint {
	return endpoint{field: "listen", addr: addr, tls: t, tlsField: "tls"}
}

func adminEndpoint(addr string, t *configs.TLS) endpoint {
	return endpoint{field: "admin.listen", addr: addr, tls: t, tlsField: "admin.tls"}
}

// serveTLS returns ln serving TLS with t's certificate, read again on a
// handshake when its files have changed: a rotation is served without a
// restart, and a rotation to files that cannot be read is logged while
// the certificate before it serves on.
func serveTLS(ln net.Listener, t *configs.TLS, field string, logger *zap.Logger) (net.Listener, error) {
	pair, err := certs.NewKeyPair(t.CertFile, t.KeyFile, logger.With(zap.String("field", field)))
	if err != nil {
		var fe *certs.FileError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("%s.%s: %s: %w", field, fe.Field, fe.Path, fe.Err)
		}
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return tls.NewListener(ln, &tls.Config{
		GetCertificate: pair.GetCertificate,
		MinVersion:     tls.VersionTLS12,
		// The servers speak HTTP/1.1 only.
		NextProtos: []string{"http/1.1"},
	}), nil
}
