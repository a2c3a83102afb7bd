package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nodelet/nodelet/hostsetup"
)

// upstreamProcSys is a temp /proc/sys holding upstream's kernel tunables, so
// that building an agent in a test neither fails on nor writes the host's kernel.
func upstreamProcSys(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, kt := range hostsetup.KernelTunables() {
		p := filepath.Join(root, kt.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(kt.Want)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
