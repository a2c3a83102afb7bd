// Package logind runs, inside a test process, a private dbus-daemon with fakes of the parts
// of systemd-logind (org.freedesktop.login1) and systemd (org.freedesktop.systemd1) that
// nodelet's graceful node shutdown uses. Point nodelet at it with
// DBUS_SYSTEM_BUS_ADDRESS=<Env.Addr> and NODELET_LOGIND_DROPIN=<Env.DropIn>.
//
// Inhibit hands out the write end of a pipe and the fake watches the read end, so a test
// sees exactly when nodelet closes its lock (once DropOwnCopies has closed the fake's copy).
package logind

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// D-Bus names, as systemd spells them.
const (
	LogindService  = "org.freedesktop.login1"
	LogindPath     = dbus.ObjectPath("/org/freedesktop/login1")
	LogindIface    = "org.freedesktop.login1.Manager"
	SystemdService = "org.freedesktop.systemd1"
	SystemdPath    = dbus.ObjectPath("/org/freedesktop/systemd1")
	SystemdIface   = "org.freedesktop.systemd1.Manager"

	propsIface = "org.freedesktop.DBus.Properties"
)

// Bus is a private dbus-daemon on a unix socket.
type Bus struct {
	Addr   string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// StartBus runs dbus-daemon listening on dir/bus. Anyone may own any name, so the fakes can
// own logind's and systemd's.
func StartBus(dir string) (*Bus, error) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		return nil, fmt.Errorf("finding dbus-daemon (Debian package dbus-daemon): %w", err)
	}
	conf := filepath.Join(dir, "bus.conf")
	err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
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
	b := &Bus{stderr: &bytes.Buffer{}}
	b.cmd = exec.Command("dbus-daemon", "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	b.cmd.Stderr = b.stderr
	// Die with the test binary, whatever kills it.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting dbus-daemon: %w", err)
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dbus-daemon: %w", err)
	}
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("reading dbus-daemon's address (stderr %q): %w", b.stderr.String(), err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	b.Addr = strings.TrimSpace(line)
	return b, nil
}

// Stderr is what dbus-daemon wrote so far, for failure output.
func (b *Bus) Stderr() string { return b.stderr.String() }

// Close kills the daemon.
func (b *Bus) Close() error {
	if b.cmd == nil || b.cmd.Process == nil {
		return nil
	}
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
	b.cmd = nil
	return nil
}

// Inhibit is one call to the fake logind's Inhibit and the lock it handed out.
type Inhibit struct {
	What, Who, Why, Mode string
	// Inode is the pipe's inode: /proc/<pid>/fd of the holder links to pipe:[Inode].
	Inode uint64

	w        *os.File // the fake's own copy of the write end, closed by DropOwnCopies
	closed   chan struct{}
	closedAt time.Time // set before closed is closed
}

// Closed is closed once every copy of the lock's fd is closed.
func (i *Inhibit) Closed() <-chan struct{} { return i.closed }

// ClosedAt is when the lock was closed (zero while open).
func (i *Inhibit) ClosedAt() time.Time {
	select {
	case <-i.closed:
		return i.closedAt
	default:
		return time.Time{}
	}
}

// HeldBy says whether process pid has the lock's fd open.
func (i *Inhibit) HeldBy(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := fmt.Sprintf("pipe:[%d]", i.Inode)
	for _, e := range entries {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == want {
			return true
		}
	}
	return false
}

// Logind is the fake org.freedesktop.login1 on its own connection, which owns the name, so
// the signals it emits come from logind's current owner.
type Logind struct {
	conn *dbus.Conn

	mu       sync.Mutex
	delay    time.Duration
	inhibits []*Inhibit
}

type logindObj struct{ l *Logind }

func (o logindObj) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(r.Fd()), &st); err != nil {
		r.Close()
		w.Close()
		return 0, dbus.MakeFailedError(err)
	}
	in := &Inhibit{What: what, Who: who, Why: why, Mode: mode, Inode: st.Ino, w: w, closed: make(chan struct{})}
	go func() {
		defer r.Close()
		_, _ = io.Copy(io.Discard, r) // EOF once no write end is open anywhere
		in.closedAt = time.Now()
		close(in.closed)
	}()
	o.l.mu.Lock()
	defer o.l.mu.Unlock() // orders Fd before DropOwnCopies' Close for the race detector
	o.l.inhibits = append(o.l.inhibits, in)
	return dbus.UnixFD(w.Fd()), nil
}

type propsObj struct{ l *Logind }

func (o propsObj) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	if iface != LogindIface || name != "InhibitDelayMaxUSec" {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
	}
	return dbus.MakeVariant(uint64(o.l.Delay() / time.Microsecond)), nil
}

func (o propsObj) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != LogindIface {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{iface})
	}
	return map[string]dbus.Variant{"InhibitDelayMaxUSec": dbus.MakeVariant(uint64(o.l.Delay() / time.Microsecond))}, nil
}

// StartLogind connects to the bus at addr, exports the fake and takes logind's name.
func StartLogind(addr string, delay time.Duration) (*Logind, error) {
	conn, err := dbus.Connect(addr)
	if err != nil {
		return nil, fmt.Errorf("connecting the fake logind to %s: %w", addr, err)
	}
	l := &Logind{conn: conn, delay: delay}
	if err := conn.Export(logindObj{l}, LogindPath, LogindIface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("exporting the fake logind: %w", err)
	}
	if err := conn.Export(propsObj{l}, LogindPath, propsIface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("exporting the fake logind's properties: %w", err)
	}
	if reply, err := conn.RequestName(LogindService, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("fake logind owning %s: reply %v: %w", LogindService, reply, err)
	}
	return l, nil
}

// Delay is InhibitDelayMaxUSec as the fake reports it.
func (l *Logind) Delay() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay
}

// SetDelay changes InhibitDelayMaxUSec (what a reload of logind.conf does).
func (l *Logind) SetDelay(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = d
}

// Inhibits are the Inhibit calls so far, oldest first.
func (l *Logind) Inhibits() []*Inhibit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Inhibit(nil), l.inhibits...)
}

// DropOwnCopies closes the fake's copies of the handed-out fds, so that from then on a lock
// is closed exactly when its holder closes it. Call it once the holder has the lock (see
// Inhibit.HeldBy); locks handed out later need another call.
func (l *Logind) DropOwnCopies() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, in := range l.inhibits {
		_ = in.w.Close()
	}
}

// PrepareForShutdown emits the signal from logind's connection: true announces a shutdown,
// false cancels it.
func (l *Logind) PrepareForShutdown(active bool) error {
	if err := l.conn.Emit(LogindPath, LogindIface+".PrepareForShutdown", active); err != nil {
		return fmt.Errorf("emitting PrepareForShutdown(%v): %w", active, err)
	}
	return nil
}

// Close drops logind's name (its connection) and the fake's copies of the locks.
func (l *Logind) Close() error {
	l.DropOwnCopies()
	return l.conn.Close()
}

// KillUnitCall is one call to the fake systemd's KillUnit.
type KillUnitCall struct {
	Unit, Whom string
	Signal     int32
}

// Systemd is the fake org.freedesktop.systemd1. KillUnit(systemd-logind.service, all,
// SIGHUP) does what the real reload does: it applies the drop-in's InhibitDelayMaxSec to
// the fake logind.
type Systemd struct {
	conn   *dbus.Conn
	dropIn string
	logind *Logind

	mu    sync.Mutex
	kills []KillUnitCall
}

type systemdObj struct{ s *Systemd }

var inhibitDelayRE = regexp.MustCompile(`(?ms)^\[Login\]$.*^InhibitDelayMaxSec=(\d+)$`)

func (o systemdObj) KillUnit(unit, whom string, signal int32) *dbus.Error {
	s := o.s
	s.mu.Lock()
	s.kills = append(s.kills, KillUnitCall{Unit: unit, Whom: whom, Signal: signal})
	s.mu.Unlock()
	if unit != "systemd-logind.service" || signal != int32(syscall.SIGHUP) {
		return nil
	}
	b, err := os.ReadFile(s.dropIn)
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	m := inhibitDelayRE.FindSubmatch(b)
	if m == nil {
		return dbus.MakeFailedError(fmt.Errorf("no [Login] InhibitDelayMaxSec in %q", b))
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	s.logind.SetDelay(time.Duration(n) * time.Second)
	return nil
}

// StartSystemd exports the fake systemd on its own connection to addr; KillUnit reads dropIn.
func StartSystemd(addr, dropIn string, l *Logind) (*Systemd, error) {
	conn, err := dbus.Connect(addr)
	if err != nil {
		return nil, fmt.Errorf("connecting the fake systemd to %s: %w", addr, err)
	}
	s := &Systemd{conn: conn, dropIn: dropIn, logind: l}
	if err := conn.Export(systemdObj{s}, SystemdPath, SystemdIface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("exporting the fake systemd: %w", err)
	}
	if reply, err := conn.RequestName(SystemdService, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("fake systemd owning %s: reply %v: %w", SystemdService, reply, err)
	}
	return s, nil
}

// KillUnits are the KillUnit calls so far.
func (s *Systemd) KillUnits() []KillUnitCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]KillUnitCall(nil), s.kills...)
}

// Close closes the fake's connection.
func (s *Systemd) Close() error { return s.conn.Close() }

// Env is a bus with the fake logind and systemd on it.
type Env struct {
	Bus     *Bus
	Logind  *Logind
	Systemd *Systemd
	// DropIn is where nodelet should write its logind drop-in (NODELET_LOGIND_DROPIN).
	DropIn string
}

// Addr is the bus address (DBUS_SYSTEM_BUS_ADDRESS).
func (e *Env) Addr() string { return e.Bus.Addr }

// NodeletEnv is the environment that points nodelet at this bus and drop-in.
func (e *Env) NodeletEnv() []string {
	return []string{"DBUS_SYSTEM_BUS_ADDRESS=" + e.Bus.Addr, "NODELET_LOGIND_DROPIN=" + e.DropIn}
}

// Start starts a bus in a temp dir of t with a fake logind reporting InhibitDelayMaxUSec =
// delay and a fake systemd, all stopped at cleanup. It fails the test on error.
func Start(t testing.TB, delay time.Duration) *Env {
	t.Helper()
	e, err := start(t.TempDir(), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dbus-daemon stderr:\n%s", e.Bus.Stderr())
		}
		_ = e.Close()
	})
	return e
}

func start(dir string, delay time.Duration) (*Env, error) {
	bus, err := StartBus(dir)
	if err != nil {
		return nil, err
	}
	e := &Env{Bus: bus, DropIn: filepath.Join(dir, "logind.conf.d", "99-nodelet.conf")}
	if e.Logind, err = StartLogind(bus.Addr, delay); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	if e.Systemd, err = StartSystemd(bus.Addr, e.DropIn, e.Logind); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

// Close stops the fakes and the bus.
func (e *Env) Close() error {
	var errs []error
	if e.Systemd != nil {
		errs = append(errs, e.Systemd.Close())
	}
	if e.Logind != nil {
		errs = append(errs, e.Logind.Close())
	}
	errs = append(errs, e.Bus.Close())
	return errors.Join(errs...)
}
