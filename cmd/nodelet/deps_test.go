package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The binary must not link test support: package testing (its flags, its
// helpers) has no place in a node agent. Test-only packages (cri/fakecri,
// internal/leakcheck, internal/dbustest, internal/eventually, internal/spantest,
// internal/golden) import it, so this also catches a product package that
// imports one of them.
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
	for _, banned := range []string{"testing", "github.com/nodelet/nodelet/cri/fakecri", "github.com/nodelet/nodelet/internal/eventually", "github.com/nodelet/nodelet/internal/leakcheck", "github.com/nodelet/nodelet/internal/dbustest", "github.com/nodelet/nodelet/internal/spantest", "github.com/nodelet/nodelet/internal/golden"} {
		if slices.Contains(deps, banned) {
			t.Errorf("cmd/nodelet depends on %s (go list -deps ./cmd/nodelet); move the test support out of the product package that imports it", banned)
		}
	}
}
