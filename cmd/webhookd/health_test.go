package main

import (
	"bytes"
	"context"
	"testing"
)

func TestHealthCommand(t *testing.T) {
	m, c := startMain(t, testConfig(t, t.TempDir(), "http://127.0.0.1:9/", "127.0.0.1:0", "127.0.0.1:0"))
	probe := func() error {
		cmd := newRootCommand()
		cmd.SetArgs([]string{"health", "--url", "http://" + c.public + "/readyz"})
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		return cmd.Execute()
	}
	if err := probe(); err != nil {
		t.Errorf("health of a running gateway: %v", err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := probe(); err == nil {
		t.Error("health of a stopped gateway succeeded")
	}
}
