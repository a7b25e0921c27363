package sender

import "crypto/tls"

// SetBodyBudget lets tests hold entries without their bodies, as in a
// backlog, without writing megabytes.
func SetBodyBudget(f *Forwarder, n int) { f.bodyBudget = n }

// SetTLSConfig lets tests trust a test server's certificate; set it before Open.
func SetTLSConfig(f *Forwarder, c *tls.Config) { f.tlsConfig = c }
