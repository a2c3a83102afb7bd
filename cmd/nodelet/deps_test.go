package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The binary must not link test support: package testing (its flags, its
// helpers) has no place in a node agent, nor anything under
// internal/testsupport (the in-memory CRI runtime, the polling and leak
// helpers, fake D-Bus services...), which is where test support lives.
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-deps", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v: %s", err, stderr.String())
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	const testSupport = "github.com/nodelet/nodelet/internal/testsupport/"
	for _, dep := range deps {
		if dep == "testing" || strings.HasPrefix(dep, testSupport) {
			t.Errorf("cmd/nodelet depends on %s (go list -deps ./cmd/nodelet); move the test support out of the product package that imports it", dep)
		}
	}
}
