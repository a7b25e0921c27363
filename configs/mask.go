package configs

import (
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// MaskedSecret is what a secret reads as in a masked configuration. It is
// the same whatever the secret, so that not even its length is given away.
const MaskedSecret = "****"

// Masked returns a deep copy of c that is safe to print or log: the admin
// token, the password in storage.dsn, every verify secret, and of every
// route the signing secret, the password its URL may carry and every value
// of its headers (they carry credentials such as "Authorization: Bearer
// ...") read as MaskedSecret. An empty secret stays empty, so that a reader
// can still tell it is unset. c is not changed; the copy shares its routes'
// compiled filters, which nothing changes.
func (c *Config) Masked() *Config {
	m := *c
	m.Admin.Token = mask(c.Admin.Token)
	m.TLS = clonePtr(c.TLS)
	m.Admin.TLS = clonePtr(c.Admin.TLS)
	m.Storage.DSN = maskDSN(c.Storage.DSN)
	m.Record = c.Record.clone()
	m.Tracing.Endpoint = maskURL(c.Tracing.Endpoint)
	if c.Tracing.SampleRatio != nil {
		ratio := *c.Tracing.SampleRatio
		m.Tracing.SampleRatio = &ratio
	}
	m.Sources = slices.Clone(c.Sources)
	for i := range m.Sources {
		m.Sources[i] = c.Sources[i].masked()
	}
	return &m
}

func (s Source) masked() Source {
	s.FingerprintExclude = slices.Clone(s.FingerprintExclude)
	s.Responses = maps.Clone(s.Responses)
	s.Record = s.Record.clone()
	if s.Verify != nil {
		v := *s.Verify
		v.Secrets = slices.Clone(v.Secrets)
		for i := range v.Secrets {
			v.Secrets[i] = mask(v.Secrets[i])
		}
		s.Verify = &v
	}
	s.Routes = slices.Clone(s.Routes)
	for i := range s.Routes {
		f := &s.Routes[i]
		f.URL = maskURL(f.URL)
		f.PassHeaders = slices.Clone(f.PassHeaders)
		f.Headers = maps.Clone(f.Headers)
		for k, v := range f.Headers {
			f.Headers[k] = mask(v)
		}
		f.TLS = clonePtr(f.TLS)
		if f.Sign != nil {
			sign := *f.Sign
			sign.Secret = mask(sign.Secret)
			f.Sign = &sign
		}
	}
	return s
}

// clonePtr copies what p points to, a struct of plain values.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func (r *Record) clone() *Record {
	if r == nil {
		return nil
	}
	c := *r
	c.Redact = slices.Clone(r.Redact)
	return &c
}

// maskURL hides the password a URL may carry in its user information.
func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); !ok {
		return raw
	}
	// Redacted writes "xxxxx" for it; url would escape MaskedSecret.
	return strings.Replace(u.Redacted(), ":xxxxx@", ":"+MaskedSecret+"@", 1)
}

// dsnPassword is a password in a key=value connection string, quoted or
// not, or in a URL's query.
var dsnPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// maskDSN hides the password of a PostgreSQL connection string, given in
// a URL's user information, its query, or a key=value pair.
func maskDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		dsn = maskURL(dsn)
	}
	return dsnPassword.ReplaceAllString(dsn, "${1}"+MaskedSecret)
}

func mask(secret string) string {
	if secret == "" {
		return ""
	}
	return MaskedSecret
}
