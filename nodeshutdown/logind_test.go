package nodeshutdown

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodelet/nodelet/internal/testsupport/dbustest"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// startBus runs a private dbus-daemon for one test and returns its address.
func startBus(t *testing.T) string { return dbustest.NewBus(t).Addr }

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	conn, err := dbustest.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func startFakeLogind(t *testing.T, addr string, delay time.Duration) *dbustest.Logind {
	t.Helper()
	l, err := dbustest.StartLogind(addr, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func startFakeSystemd(t *testing.T, addr string, opts dbustest.SystemdOptions) *dbustest.Systemd {
	t.Helper()
	s, err := dbustest.StartSystemd(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func prepareForShutdown(t *testing.T, l *dbustest.Logind, active bool) {
	t.Helper()
	if err := l.PrepareForShutdown(active); err != nil {
		t.Fatal(err)
	}
}

// inhibitCalls renders the fake logind's Inhibit calls as what|who|why|mode.
func inhibitCalls(l *dbustest.Logind) []string {
	var out []string
	for _, in := range l.Inhibits() {
		out = append(out, strings.Join([]string{in.What, in.Who, in.Why, in.Mode}, "|"))
	}
	return out
}

var logindReload = dbustest.KillUnitCall{Unit: "systemd-logind.service", Whom: "all", Signal: 1}

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
	sd := startFakeSystemd(t, addr, dbustest.SystemdOptions{Logind: logind, DropIn: dropIn})
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
	if k := sd.KillUnits(); len(k) != 1 || k[0] != logindReload {
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
	if n := len(sd.KillUnits()); n != 1 {
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
	startFakeLogind(t, addr, 5*time.Second)
	// Without Logind in its options, the fake systemd only records KillUnit: a logind
	// that does not take the reload.
	sd := startFakeSystemd(t, addr, dbustest.SystemdOptions{DropIn: dropIn})
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
	if len(sd.KillUnits()) != 1 {
		t.Errorf("KillUnit calls = %v, want 1", sd.KillUnits())
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
	calls := inhibitCalls(logind)
	if len(calls) != 1 || calls[0] != "shutdown|nodelet|nodelet needs time to stop pods gracefully|delay" {
		t.Fatalf("Inhibit calls = %q, want one delay lock for shutdown", calls)
	}
	if !inh.Held() || testutil.ToFloat64(inh.held) != 1 {
		t.Fatal("Held() = false (or the gauge 0) after Acquire")
	}
	logind.DropOwnCopies()
	lock := logind.Inhibits()[0]
	select {
	case <-lock.Closed():
		t.Fatal("the lock's fd was closed while nodelet holds it")
	default:
	}
	inh.Release()
	waitClosed(t, "the lock's fd to be closed by Release", lock.Closed())
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
	prepareForShutdown(t, logind, false)
	if got := nextEvent(t, inh); got != false {
		t.Fatal("delivered a PrepareForShutdown(true) that logind did not send")
	}
	prepareForShutdown(t, logind, true)
	if got := nextEvent(t, inh); got != true {
		t.Fatal("PrepareForShutdown(true) delivered as false")
	}
	prepareForShutdown(t, logind, false)
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
	first.DropOwnCopies()

	// logind exits: its name goes away, and nodelet drops the dead lock.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "nodelet to close the old logind's lock", first.Inhibits()[0].Closed())

	// A new logind takes the name: nodelet takes the lock again from it.
	second := startFakeLogind(t, addr, 30*time.Second)
	eventually.True(t, "an Inhibit call to the new logind", func() bool { return len(second.Inhibits()) == 1 })
	eventually.True(t, "the lock to be held again", inh.Held)
	second.DropOwnCopies()
	select {
	case <-second.Inhibits()[0].Closed():
		t.Fatal("the new lock is already closed")
	default:
	}
	// Signals from the new logind are believed.
	prepareForShutdown(t, second, true)
	if !nextEvent(t, inh) {
		t.Fatal("PrepareForShutdown(true) from the new logind delivered as false")
	}
	inh.Release()
	waitClosed(t, "the new lock to be closed by Release", second.Inhibits()[0].Closed())

	// After Release, a restart does not take the lock again.
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	third := startFakeLogind(t, addr, 30*time.Second)
	// nodelet handles signals in order: once the third logind's PrepareForShutdown is through,
	// so is the NameOwnerChanged that announced it.
	prepareForShutdown(t, third, true)
	if !nextEvent(t, inh) {
		t.Fatal("PrepareForShutdown(true) from the third logind delivered as false")
	}
	if n := len(third.Inhibits()); n != 0 || inh.Held() {
		t.Fatalf("lock taken again after Release: %d Inhibit calls, held %v", n, inh.Held())
	}
}

func TestInhibitorReconnectsWhenTheBusRestarts(t *testing.T) {
	bus := dbustest.NewBus(t)
	startFakeLogind(t, bus.Addr, 30*time.Second)
	inh := newTestInhibitor(t, bus.Addr, filepath.Join(t.TempDir(), "99-nodelet.conf"))
	if err := inh.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}

	if err := bus.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the lock to be dropped with the bus", func() bool { return !inh.Held() })
	if err := bus.Start(); err != nil { // same socket path
		t.Fatal(err)
	}
	logind := startFakeLogind(t, bus.Addr, 30*time.Second)
	// nodelet redials every second, then finds logind (already there, or arriving) and
	// takes the lock again.
	eventually.True(t, "the lock to be taken on the new bus", inh.Held)
	if n := len(logind.Inhibits()); n != 1 {
		t.Fatalf("Inhibit calls on the new bus = %d, want 1", n)
	}
	prepareForShutdown(t, logind, true)
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
	eventually.True(t, "the lock once logind appears", inh.Held)
	if n := len(logind.Inhibits()); n != 1 {
		t.Errorf("Inhibit calls = %d, want 1", n)
	}
}

func TestNewInhibitorWithoutBus(t *testing.T) {
	_, err := NewInhibitor(InhibitorOptions{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "nobus")})
	if err == nil || !strings.Contains(err.Error(), "connecting to D-Bus") {
		t.Fatalf("NewInhibitor on a missing bus = %v, want a connect error", err)
	}
}
