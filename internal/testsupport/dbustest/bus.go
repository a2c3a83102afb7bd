// Package dbustest is test support for nodelet's D-Bus clients: a private dbus-daemon
// (Bus, restartable on the same socket), a fake systemd-logind (Logind:
// org.freedesktop.login1) and a fake systemd (Systemd: org.freedesktop.systemd1 with
// KillUnit and the transient-unit calls the systemd cgroup driver makes). Unit tests
// and the e2e suite share it; nothing in the product imports it.
package dbustest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/godbus/dbus/v5"
)

// ErrNoDaemon is returned by StartBus when dbus-daemon is not installed.
var ErrNoDaemon = errors.New("dbus-daemon is not installed (Debian package dbus-daemon)")

// Bus is a private dbus-daemon on a unix socket in a directory of its own.
type Bus struct {
	// Addr is the address the daemon printed (it changes its guid on a restart).
	Addr string

	conf string

	mu     sync.Mutex
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// syncBuffer is dbus-daemon's stderr: exec copies into it from its own goroutine while
// Stderr reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StartBus runs dbus-daemon listening on dir/bus. Anyone may own any name, so the fakes
// can own logind's and systemd's.
func StartBus(dir string) (*Bus, error) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		return nil, fmt.Errorf("starting a private D-Bus: %w", ErrNoDaemon)
	}
	b := &Bus{conf: filepath.Join(dir, "bus.conf"), stderr: &syncBuffer{}}
	err := os.WriteFile(b.conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+escapeAddrValue(filepath.Join(dir, "bus"))+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o644)
	if err != nil {
		return nil, fmt.Errorf("writing the bus config: %w", err)
	}
	if err := b.Start(); err != nil {
		return nil, err
	}
	return b, nil
}

// NewBus starts a bus in a temp dir of t and stops it at cleanup. It skips the test when
// dbus-daemon is missing and fails it on any other error.
func NewBus(t testing.TB) *Bus {
	t.Helper()
	b, err := StartBus(t.TempDir())
	if errors.Is(err, ErrNoDaemon) {
		t.Skipf("%v; this test needs a real bus", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Stop()
		if t.Failed() {
			t.Logf("dbus-daemon stderr:\n%s", b.Stderr())
		}
	})
	return b
}

// Start (re)starts the daemon on the same socket; a no-op while it runs.
func (b *Bus) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return nil
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+b.conf, "--nofork", "--nopidfile", "--print-address=1")
	cmd.Stderr = b.stderr
	// Die with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("starting dbus-daemon: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting dbus-daemon: %w", err)
	}
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("reading dbus-daemon's address (stderr %q): %w", b.stderr.String(), err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	b.cmd = cmd
	b.Addr = strings.TrimSpace(line)
	return nil
}

// Stop kills the daemon (every connection drops); Start brings it back.
func (b *Bus) Stop() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return nil
	}
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
	b.cmd = nil
	return nil
}

// Close stops the daemon for good.
func (b *Bus) Close() error { return b.Stop() }

// Stderr is what dbus-daemon wrote so far, for failure output.
func (b *Bus) Stderr() string { return b.stderr.String() }

// Connect opens a plain client connection to the bus at addr (authenticated, Hello sent).
func Connect(addr string) (*dbus.Conn, error) {
	conn, err := dbus.Connect(addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to the test bus %s: %w", addr, err)
	}
	return conn, nil
}

// escapeAddrValue escapes a value in a D-Bus address (t.TempDir paths carry the test's
// name, which may hold '=' or ','): bytes outside [-0-9A-Za-z_/.\\*] become %xx.
func escapeAddrValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_/.\\*", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	return b.String()
}
