package podruntime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestTerminationMessageLogFallbackRefusesLinksAndFIFOs: the FallbackToLogsOnError
// message comes from the container's log only when the log is a regular file
// reached through no link: a 0.log, or a container log directory, replaced by a
// link to a host file gives no host bytes, and a FIFO there returns at once
// instead of blocking the pod's sync.
func TestTerminationMessageLogFallbackRefusesLinksAndFIFOs(t *testing.T) {
	base := t.TempDir()
	logs, host := filepath.Join(base, "pods"), filepath.Join(base, "host")
	const secret = "HOST-SECRET"
	line := "2026-01-02T03:04:05.000000000Z stdout F "
	if err := os.MkdirAll(filepath.Join(host, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(host, "secret"), filepath.Join(host, "c", "0.log")} {
		if err := os.WriteFile(f, []byte(line+secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	spec := &v1.Container{Name: "c", TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError}
	// podLog makes <logs>/ns_<pod>_uid and plants what plant says in it.
	podLog := func(t *testing.T, pod string, plant func(podDir string) error) string {
		t.Helper()
		dir := filepath.Join(logs, "ns_"+pod+"_uid")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := plant(dir); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "c", "0.log")
	}
	inDir := func(f func(path string) error) func(string) error {
		return func(dir string) error {
			if err := os.Mkdir(filepath.Join(dir, "c"), 0o755); err != nil {
				return err
			}
			return f(filepath.Join(dir, "c", "0.log"))
		}
	}
	message := func(t *testing.T, path string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got := make(chan string, 1)
		go func() {
			got <- TerminationMessage(spec, &runtimeapi.ContainerStatus{ExitCode: 1, LogPath: path})
		}()
		select {
		case msg := <-got:
			return msg
		case <-ctx.Done():
			// Let the blocked reader go (a writer on the FIFO ends its open).
			if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
			t.Fatalf("TerminationMessage(%s) blocked", path)
			return ""
		}
	}

	t.Run("regular log", func(t *testing.T) {
		path := podLog(t, "ok", inDir(func(p string) error { return os.WriteFile(p, []byte(line+"boom\n"), 0o600) }))
		if got := message(t, path); got != "boom\n" {
			t.Fatalf("message = %q, want %q", got, "boom\n")
		}
	})
	for name, plant := range map[string]func(string) error{
		"log linked to a host file":      inDir(func(p string) error { return os.Symlink(filepath.Join(host, "secret"), p) }),
		"container dir linked to a host": func(dir string) error { return os.Symlink(filepath.Join(host, "c"), filepath.Join(dir, "c")) },
	} {
		t.Run(name, func(t *testing.T) {
			path := podLog(t, strings.ReplaceAll(name, " ", ""), plant)
			if got := message(t, path); strings.Contains(got, secret) {
				t.Fatalf("message %q holds the host file's bytes", got)
			}
		})
	}
	t.Run("fifo", func(t *testing.T) {
		path := podLog(t, "fifo", inDir(func(p string) error { return unix.Mkfifo(p, 0o600) }))
		if got := message(t, path); got != "" {
			t.Fatalf("message = %q, want none", got)
		}
	})
}
