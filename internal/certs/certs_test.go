package certs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd/internal/certs/certstest"
)

func commonName(t *testing.T, k *KeyPair) string {
	t.Helper()
	c := k.Certificate()
	if c.Leaf == nil {
		t.Fatal("no leaf parsed")
	}
	return c.Leaf.Subject.CommonName
}

// A pair replaced on disk is served from the next look at the files; a
// replacement that cannot be read is logged and the pair before it serves
// on, until the files are fixed.
func TestKeyPairReloadsAndKeepsTheLastGoodPair(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "a")
	core, logs := observer.New(zap.InfoLevel)
	k, err := NewKeyPair(certFile, keyFile, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	k.r.every = 0
	if got := commonName(t, k); got != "a" {
		t.Fatalf("serves %q, want a", got)
	}
	ca.WriteFiles(t, dir, "b")
	if got := commonName(t, k); got != "b" {
		t.Fatalf("after rotation serves %q, want b", got)
	}
	certstest.Replace(t, certFile, []byte("not a certificate"))
	if got := commonName(t, k); got != "b" {
		t.Fatalf("after a bad rotation serves %q, want b still", got)
	}
	if n := logs.FilterMessageSnippet("cannot be read").Len(); n != 1 {
		t.Errorf("%d errors logged for the bad files, want 1", n)
	}
	commonName(t, k)
	if n := logs.FilterMessageSnippet("cannot be read").Len(); n != 1 {
		t.Errorf("%d errors logged for unchanged bad files, want 1", n)
	}
	ca.WriteFiles(t, dir, "c")
	if got := commonName(t, k); got != "c" {
		t.Fatalf("after the files were fixed serves %q, want c", got)
	}
}

// Kubernetes mounts a secret's files through a symbolic link to a
// directory, and rotates them by pointing the link at a new directory.
func TestKeyPairFollowsASymbolicLinkSwap(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	ca.WriteFiles(t, mkdir(t, dir, "v1"), "a")
	ca.WriteFiles(t, mkdir(t, dir, "v2"), "b")
	link := filepath.Join(dir, "..data")
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	k, err := NewKeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	k.r.every = 0
	if got := commonName(t, k); got != "a" {
		t.Fatalf("serves %q, want a", got)
	}
	if err := os.Symlink("v2", link+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link+".tmp", link); err != nil {
		t.Fatal(err)
	}
	if got := commonName(t, k); got != "b" {
		t.Fatalf("after the swap serves %q, want b", got)
	}
}

func mkdir(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each file's problem names the file's role.
func TestReadErrorsNameTheField(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "a")
	other := certstest.NewCA(t, "other")
	_, otherKey := other.WriteFiles(t, mkdir(t, dir, "other"), "b")
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		read  func() error
		field string
	}{
		{"missing cert", func() error { _, err := ReadKeyPair(missing, keyFile); return err }, "cert_file"},
		{"missing key", func() error { _, err := ReadKeyPair(certFile, missing); return err }, "key_file"},
		{"cert not PEM", func() error { _, err := ReadKeyPair(garbage, keyFile); return err }, "cert_file"},
		{"key not PEM", func() error { _, err := ReadKeyPair(certFile, garbage); return err }, "key_file"},
		{"key of another cert", func() error { _, err := ReadKeyPair(certFile, otherKey); return err }, "key_file"},
		{"missing CA", func() error { _, err := ReadPool(missing); return err }, "ca_file"},
		{"CA not PEM", func() error { _, err := ReadPool(garbage); return err }, "ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fe *FileError
			if err := tc.read(); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %v, want a FileError on %s", err, tc.field)
			}
		})
	}
	if _, err := ReadKeyPair(certFile, keyFile); err != nil {
		t.Errorf("a good pair: %v", err)
	}
}
