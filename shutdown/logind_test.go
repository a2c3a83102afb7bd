package shutdown

import (
	"bufio"
	"bytes"
	"context"
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
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// startBus runs a private dbus-daemon for one test and returns its address.
func startBus(t *testing.T) string {
	return startRestartableBus(t).addr
}

type testBus struct {
	addr, conf string
	cmd        *exec.Cmd
	stderr     *bytes.Buffer
}

func startRestartableBus(t *testing.T) *testBus {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon is not installed (Debian package dbus-daemon); the logind D-Bus tests need a real bus")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	b := &testBus{conf: filepath.Join(dir, "bus.conf")}
	// A session-type bus that lets anyone own any name: the fakes own logind's and systemd's.
	err := os.WriteFile(b.conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	t.Cleanup(func() { b.stop(t) })
	return b
}

func (b *testBus) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command("dbus-daemon", "--config-file="+b.conf, "--nofork", "--nopidfile", "--print-address=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.stderr = &bytes.Buffer{}
	cmd.Stderr = b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dbus-daemon: %v", err)
	}
	b.cmd = cmd
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.stop(t)
		t.Fatalf("reading dbus-daemon's address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	b.addr = strings.TrimSpace(line)
}

func (b *testBus) stop(t *testing.T) {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
	if t.Failed() {
		t.Logf("dbus-daemon stderr:\n%s", b.stderr.String())
	}
	b.cmd = nil
}

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connecting to the test bus: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// fakeLogind exports the parts of org.freedesktop.login1 nodelet uses. Each Inhibit returns
// the write end of a pipe; the fake reads the other end and so sees the lock's release.
type fakeLogind struct {
	conn *dbus.Conn

	mu       sync.Mutex
	delay    time.Duration
	inhibits [][]string
	locks    []*fakeLock
}

type fakeLock struct {
	w      *os.File      // the fake's own copy, closed by dropOwnCopies
	closed chan struct{} // closed when every copy of the write end is closed
}

type logindObj struct{ f *fakeLogind }

func (o logindObj) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	l := &fakeLock{w: w, closed: make(chan struct{})}
	go func() {
		defer r.Close()
		_, _ = io.Copy(io.Discard, r)
		close(l.closed)
	}()
	o.f.mu.Lock()
	defer o.f.mu.Unlock() // orders Fd before dropOwnCopies' Close for the race detector
	o.f.inhibits = append(o.f.inhibits, []string{what, who, why, mode})
	o.f.locks = append(o.f.locks, l)
	return dbus.UnixFD(w.Fd()), nil
}

type propsObj struct{ f *fakeLogind }

func (o propsObj) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	if iface != logindIface || name != "InhibitDelayMaxUSec" {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	return dbus.MakeVariant(uint64(o.f.delay / time.Microsecond)), nil
}

func startFakeLogind(t *testing.T, addr string, delay time.Duration) *fakeLogind {
	t.Helper()
	f := &fakeLogind{conn: connect(t, addr), delay: delay}
	if err := f.conn.Export(logindObj{f}, logindPath, logindIface); err != nil {
		t.Fatal(err)
	}
	if err := f.conn.Export(propsObj{f}, logindPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	reply, err := f.conn.RequestName(logindService, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake logind could not own %s: %v %v", logindService, reply, err)
	}
	t.Cleanup(f.dropOwnCopies)
	return f
}

func (f *fakeLogind) setDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

func (f *fakeLogind) calls() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.inhibits...)
}

func (f *fakeLogind) lock(i int) *fakeLock {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.locks[i]
}

// dropOwnCopies closes the fake's copies of the handed-out fds, so that from then on a lock
// is closed exactly when nodelet closes it. Call it once nodelet holds the lock.
func (f *fakeLogind) dropOwnCopies() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.locks {
		_ = l.w.Close()
	}
}

func (f *fakeLogind) prepareForShutdown(t *testing.T, active bool) {
	t.Helper()
	if err := f.conn.Emit(logindPath, logindIface+".PrepareForShutdown", active); err != nil {
		t.Fatal(err)
	}
}

// fakeSystemd answers KillUnit(systemd-logind.service, all, SIGHUP) the way logind reloads:
// by applying the drop-in's InhibitDelayMaxSec, unless ignore is set.
type fakeSystemd struct {
	dropIn string
	logind *fakeLogind
	ignore bool

	mu    sync.Mutex
	kills [][]any
}

func (s *fakeSystemd) KillUnit(unit, whom string, signal int32) *dbus.Error {
	s.mu.Lock()
	s.kills = append(s.kills, []any{unit, whom, signal})
	s.mu.Unlock()
	if s.ignore || unit != "systemd-logind.service" || signal != 1 {
		return nil
	}
	b, err := os.ReadFile(s.dropIn)
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	m := regexp.MustCompile(`(?ms)^\[Login\]$.*^InhibitDelayMaxSec=(\d+)$`).FindSubmatch(b)
	if m == nil {
		return dbus.MakeFailedError(fmt.Errorf("no [Login] InhibitDelayMaxSec in %q", b))
	}
	n, _ := strconv.Atoi(string(m[1]))
	s.logind.setDelay(time.Duration(n) * time.Second)
	return nil
}

func (s *fakeSystemd) calls() [][]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]any(nil), s.kills...)
}

func startFakeSystemd(t *testing.T, addr string, s *fakeSystemd) {
	t.Helper()
	conn := connect(t, addr)
	if err := conn.Export(s, systemdPath, systemdIface); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName(systemdService, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake systemd could not own %s: %v %v", systemdService, reply, err)
	}
}

func newTestInhibitor(t *testing.T, addr, dropIn string) *Inhibitor {
	t.Helper()
	return newTestInhibitorWith(t, InhibitorOptions{BusAddress: addr, DropInPath: dropIn})
}

func newTestInhibitorWith(t *testing.T, opts InhibitorOptions) *Inhibitor {
	t.Helper()
	opts.ReloadTimeout = 300 * time.Millisecond
	inh, err := NewInhibitor(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inh.Close() })
	return inh
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func nextEvent(t *testing.T, inh *Inhibitor) bool {
	t.Helper()
	select {
	case v := <-inh.Events():
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for PrepareForShutdown")
		return false
	}
}

func TestInhibitorRaisesDelayThroughDropIn(t *testing.T) {
	addr := startBus(t)
	dropIn := filepath.Join(t.TempDir(), "logind.conf.d", "99-nodelet.conf")
	logind := startFakeLogind(t, addr, 5*time.Second)
	sd := &fakeSystemd{dropIn: dropIn, logind: logind}
	startFakeSystemd(t, addr, sd)
	inh := newTestInhibitor(t, addr, dropIn)
	ctx := context.Background()

	got, err := inh.InhibitDelayMax(ctx)
	if err != nil || got != 5*time.Second {
		t.Fatalf("InhibitDelayMax = %s, %v; want 5s", got, err)
	}
	c, err := inh.EnsureInhibitDelay(ctx, 29500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !c.OK() || c.Before != 5*time.Second || c.After != 30*time.Second || !c.WroteDropIn {
		t.Fatalf("EnsureInhibitDelay = %+v, want 5s raised to 30s through the drop-in", c)
	}
	b, err := os.ReadFile(dropIn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=30\n") {
		t.Errorf("drop-in = %q, want [Login] InhibitDelayMaxSec=30", b)
	}
	if k := sd.calls(); len(k) != 1 || fmt.Sprint(k[0]) != "[systemd-logind.service all 1]" {
		t.Errorf("KillUnit calls = %v, want one SIGHUP to systemd-logind.service", k)
	}

	// Enough already: nothing written, no reload.
	if err := os.Remove(dropIn); err != nil {
		t.Fatal(err)
	}
	c, err = inh.EnsureInhibitDelay(ctx, 10*time.Second)
	if err != nil || !c.OK() || c.WroteDropIn || c.After != 30*time.Second {
		t.Fatalf("EnsureInhibitDelay(10s) = %+v, %v; want OK without a drop-in", c, err)
	}
	if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("drop-in written although the delay was enough: %v", err)
	}
	if n := len(sd.calls()); n != 1 {
		t.Errorf("KillUnit called %d times, want still 1", n)
	}
}

func TestInhibitorReportsDelayStillTooSmall(t *testing.T) {
	addr := startBus(t)
	dir := filepath.Join(t.TempDir(), "logind.conf.d")
	dropIn := filepath.Join(dir, "99-nodelet.conf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A later-sorting drop-in wins in logind (kubernetes#102818).
	override := filepath.Join(dir, "99-unattended-upgrades.conf")
	if err := os.WriteFile(override, []byte("[Login]\nInhibitDelayMaxSec=5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-early.conf"), []byte("[Login]\nInhibitDelayMaxSec=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logind := startFakeLogind(t, addr, 5*time.Second)
	sd := &fakeSystemd{dropIn: dropIn, logind: logind, ignore: true}
	startFakeSystemd(t, addr, sd)
	reg := prometheus.NewRegistry()
	inh := newTestInhibitorWith(t, InhibitorOptions{BusAddress: addr, DropInPath: dropIn, Registerer: reg})

	c, err := inh.EnsureInhibitDelay(context.Background(), 45*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.OK() || c.Before != 5*time.Second || c.After != 5*time.Second || c.Wanted != 45*time.Second || !c.WroteDropIn {
		t.Fatalf("EnsureInhibitDelay = %+v, want not OK with 5s before and after, 45s wanted", c)
	}
	if got := testutil.ToFloat64(inh.delayMax); got != 5 {
		t.Errorf("nodelet_shutdown_inhibit_delay_max_seconds = %v, want 5", got)
	}
	if got := testutil.ToFloat64(inh.delayWanted); got != 45 {
		t.Errorf("nodelet_shutdown_inhibit_delay_wanted_seconds = %v, want 45", got)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3 {
		t.Errorf("registered inhibitor metrics = %d (%v), want 3", n, err)
	}
	if len(c.Overrides) != 1 || c.Overrides[0] != override {
		t.Errorf("Overrides = %v, want [%s]", c.Overrides, override)
	}
	if len(sd.calls()) != 1 {
		t.Errorf("KillUnit calls = %v, want 1", sd.calls())
	}
}

func TestInhibitorLockTakenAndReleased(t *testing.T) {
	addr := startBus(t)
	logind := startFakeLogind(t, addr, 30*time.Second)
	inh := newTestInhibitor(t, addr, filepath.Join(t.TempDir(), "99-nodelet.conf"))
	ctx := context.Background()

	if inh.Held() {
		t.Fatal("Held() before Acquire")
	}
	if err := inh.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inh.Acquire(ctx); err != nil { // held already: no second lock
		t.Fatal(err)
	}
	calls := logind.calls()
	if len(calls) != 1 || strings.Join(calls[0], "|") != "shutdown|nodelet|nodelet needs time to stop pods gracefully|delay" {
		t.Fatalf("Inhibit calls = %q, want one delay lock for shutdown", calls)
	}
	if !inh.Held() || testutil.ToFloat64(inh.held) != 1 {
		t.Fatal("Held() = false (or the gauge 0) after Acquire")
	}
	logind.dropOwnCopies()
	lock := logind.lock(0)
	select {
	case <-lock.closed:
		t.Fatal("the lock's fd was closed while nodelet holds it")
	default:
	}
	inh.Release()
	waitClosed(t, "the lock's fd to be closed by Release", lock.closed)
	if inh.Held() || testutil.ToFloat64(inh.held) != 0 {
		t.Fatal("Held() (or the gauge 1) after Release")
	}
}

func TestInhibitorDeliversPrepareForShutdownFromLogindOnly(t *testing.T) {
	addr := startBus(t)
	logind := startFakeLogind(t, addr, 30*time.Second)
	inh := newTestInhibitor(t, addr, filepath.Join(t.TempDir(), "99-nodelet.conf"))

	// Someone else on the bus pretends to be logind; the Ping round trip makes sure the bus
	// has passed the fake signal on before logind's real one.
	spoofer := connect(t, addr)
	if err := spoofer.Emit(logindPath, logindIface+".PrepareForShutdown", true); err != nil {
		t.Fatal(err)
	}
	if err := spoofer.BusObject().Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		t.Fatal(err)
	}
	logind.prepareForShutdown(t, false)
	if got := nextEvent(t, inh); got != false {
		t.Fatal("delivered a PrepareForShutdown(true) that logind did not send")
	}
	logind.prepareForShutdown(t, true)
	if got := nextEvent(t, inh); got != true {
		t.Fatal("PrepareForShutdown(true) delivered as false")
	}
	logind.prepareForShutdown(t, false)
	if got := nextEvent(t, inh); got != false {
		t.Fatal("PrepareForShutdown(false) delivered as true")
	}
}

func TestInhibitorRetakesLockWhenLogindRestarts(t *testing.T) {
	addr := startBus(t)
	first := startFakeLogind(t, addr, 30*time.Second)
	inh := newTestInhibitor(t, addr, filepath.Join(t.TempDir(), "99-nodelet.conf"))
	if err := inh.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	first.dropOwnCopies()

	// logind exits: its name goes away, and nodelet drops the dead lock.
	if err := first.conn.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "nodelet to close the old logind's lock", first.lock(0).closed)

	// A new logind takes the name: nodelet takes the lock again from it.
	second := startFakeLogind(t, addr, 30*time.Second)
	waitFor(t, "an Inhibit call to the new logind", func() bool { return len(second.calls()) == 1 })
	waitFor(t, "the lock to be held again", inh.Held)
	second.dropOwnCopies()
	select {
	case <-second.lock(0).closed:
		t.Fatal("the new lock is already closed")
	default:
	}
	// Signals from the new logind are believed.
	second.prepareForShutdown(t, true)
	if !nextEvent(t, inh) {
		t.Fatal("PrepareForShutdown(true) from the new logind delivered as false")
	}
	inh.Release()
	waitClosed(t, "the new lock to be closed by Release", second.lock(0).closed)

	// After Release, a restart does not take the lock again.
	if err := second.conn.Close(); err != nil {
		t.Fatal(err)
	}
	third := startFakeLogind(t, addr, 30*time.Second)
	// nodelet handles signals in order: once the third logind's PrepareForShutdown is through,
	// so is the NameOwnerChanged that announced it.
	third.prepareForShutdown(t, true)
	if !nextEvent(t, inh) {
		t.Fatal("PrepareForShutdown(true) from the third logind delivered as false")
	}
	if n := len(third.calls()); n != 0 || inh.Held() {
		t.Fatalf("lock taken again after Release: %d Inhibit calls, held %v", n, inh.Held())
	}
}

func TestInhibitorReconnectsWhenTheBusRestarts(t *testing.T) {
	bus := startRestartableBus(t)
	startFakeLogind(t, bus.addr, 30*time.Second)
	inh := newTestInhibitor(t, bus.addr, filepath.Join(t.TempDir(), "99-nodelet.conf"))
	if err := inh.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}

	bus.stop(t)
	waitFor(t, "the lock to be dropped with the bus", func() bool { return !inh.Held() })
	bus.start(t) // same socket path
	logind := startFakeLogind(t, bus.addr, 30*time.Second)
	// nodelet redials every second, then finds logind (already there, or arriving) and
	// takes the lock again.
	waitFor(t, "the lock to be taken on the new bus", inh.Held)
	if n := len(logind.calls()); n != 1 {
		t.Fatalf("Inhibit calls on the new bus = %d, want 1", n)
	}
	logind.prepareForShutdown(t, true)
	if !nextEvent(t, inh) {
		t.Fatal("PrepareForShutdown(true) after reconnecting delivered as false")
	}
}

func TestInhibitorDelayWithoutSystemdIsAnError(t *testing.T) {
	addr := startBus(t)
	dropIn := filepath.Join(t.TempDir(), "99-nodelet.conf")
	startFakeLogind(t, addr, 5*time.Second)
	inh := newTestInhibitor(t, addr, dropIn)
	c, err := inh.EnsureInhibitDelay(context.Background(), 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "KillUnit") {
		t.Fatalf("EnsureInhibitDelay without systemd = %v, want a KillUnit error", err)
	}
	if c.Before != 5*time.Second || !c.WroteDropIn || c.OK() {
		t.Errorf("DelayCheck = %+v, want 5s before, drop-in written, not OK", c)
	}
}

func TestInhibitorWithoutLogind(t *testing.T) {
	addr := startBus(t)
	inh := newTestInhibitor(t, addr, filepath.Join(t.TempDir(), "99-nodelet.conf"))
	if _, err := inh.InhibitDelayMax(context.Background()); err == nil {
		t.Error("InhibitDelayMax succeeded with no logind on the bus")
	}
	if err := inh.Acquire(context.Background()); err == nil || inh.Held() {
		t.Errorf("Acquire with no logind = %v, held %v; want an error", err, inh.Held())
	}
	// logind arriving later gets asked for the lock Acquire wanted.
	logind := startFakeLogind(t, addr, 30*time.Second)
	waitFor(t, "the lock once logind appears", inh.Held)
	if n := len(logind.calls()); n != 1 {
		t.Errorf("Inhibit calls = %d, want 1", n)
	}
}

func TestNewInhibitorWithoutBus(t *testing.T) {
	_, err := NewInhibitor(InhibitorOptions{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "nobus")})
	if err == nil || !strings.Contains(err.Error(), "connecting to D-Bus") {
		t.Fatalf("NewInhibitor on a missing bus = %v, want a connect error", err)
	}
}
