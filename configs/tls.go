package configs

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/webhookd/webhookd/internal/certs"
)

// TLS is a listener's certificate and key, PEM files read again when they
// change.
type TLS struct {
	CertFile string `yaml:"cert_file" validate:"required"`
	KeyFile  string `yaml:"key_file" validate:"required"`
}

// RouteTLS is how a route's downstream is trusted, and how webhookd
// proves itself to it, over https. Every field is optional; the files are
// PEM, read again when they change.
type RouteTLS struct {
	// CAFile, when set, is the only trust for the downstream's
	// certificate, in place of the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate presented to a
	// downstream that asks for one (mutual TLS); set both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the downstream's certificate must hold, and
	// the name sent to it (SNI); the URL's host unless set.
	ServerName string `yaml:"server_name"`
}

// tlsProblems reads every certificate, key and CA file the configuration
// names, as serve will, so that a file that cannot serve is a problem of
// its field before webhookd starts.
func (c *Config) tlsProblems() []Problem {
	var problems []Problem
	if c.TLS != nil {
		problems = append(problems, keyPairProblems("tls.", c.TLS.CertFile, c.TLS.KeyFile)...)
	}
	if c.Admin.TLS != nil {
		problems = append(problems, keyPairProblems("admin.tls.", c.Admin.TLS.CertFile, c.Admin.TLS.KeyFile)...)
	}
	for i, s := range c.Sources {
		for j, r := range s.Routes {
			if r.TLS == nil {
				continue
			}
			path := fmt.Sprintf("sources[%d].routes[%d].tls.", i, j)
			problems = append(problems, r.TLS.problems(path, r.URL)...)
		}
	}
	return problems
}

func (t *RouteTLS) problems(path, rawURL string) []Problem {
	var problems []Problem
	add := func(field, msg string) { problems = append(problems, Problem{Path: path + field, Msg: msg}) }
	if u, err := url.Parse(rawURL); err == nil && u.Scheme == "http" {
		problems = append(problems, Problem{Path: path[:len(path)-1], Msg: "is set, but url is http, which has no TLS: use https, or remove tls"})
	}
	switch {
	case *t == RouteTLS{}:
		problems = append(problems, Problem{Path: path[:len(path)-1], Msg: "is empty: set ca_file, cert_file with key_file, or server_name; or remove tls"})
	case t.CertFile != "" && t.KeyFile == "":
		add("key_file", "is required with cert_file")
	case t.CertFile == "" && t.KeyFile != "":
		add("cert_file", "is required with key_file")
	case t.CertFile != "":
		problems = append(problems, keyPairProblems(path, t.CertFile, t.KeyFile)...)
	}
	if t.ServerName != "" && validate.Var(t.ServerName, "hostname_rfc1123") != nil {
		add("server_name", fmt.Sprintf("must be a host name (got %s)", t.ServerName))
	}
	if t.CAFile != "" {
		if _, err := certs.ReadPool(t.CAFile); err != nil {
			problems = append(problems, fileProblem(path, err))
		}
	}
	return problems
}

// keyPairProblems reads a certificate and its key; required fields left
// empty are the validator's to report.
func keyPairProblems(path, certFile, keyFile string) []Problem {
	if certFile == "" || keyFile == "" {
		return nil
	}
	if _, err := certs.ReadKeyPair(certFile, keyFile); err != nil {
		return []Problem{fileProblem(path, err)}
	}
	return nil
}

// fileProblem files err, from package certs, under the field it names.
func fileProblem(path string, err error) Problem {
	var fe *certs.FileError
	if !errors.As(err, &fe) {
		return Problem{Path: path[:len(path)-1], Msg: err.Error()}
	}
	return Problem{Path: path + fe.Field, Msg: fmt.Sprintf("%s: %v", fe.Path, fe.Err)}
}
