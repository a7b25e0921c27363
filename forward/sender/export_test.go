package sender

import "crypto/tls"

// SetTLSConfig lets tests trust a test server's certificate; set it before Open.
func SetTLSConfig(f *Forwarder, c *tls.Config) { f.tlsConfig = c }
