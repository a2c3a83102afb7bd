package dbustest

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// Env is a bus with the fake logind and systemd on it, for graceful node shutdown tests.
// Point nodelet at it with DBUS_SYSTEM_BUS_ADDRESS=<Addr> and
// NODELET_LOGIND_DROPIN=<DropIn> (NodeletEnv).
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
// delay and a fake systemd that reloads it, all stopped at cleanup. It fails the test on
// any error, a missing dbus-daemon included: the e2e rig must have one.
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
	if e.Systemd, err = StartSystemd(bus.Addr, SystemdOptions{Logind: e.Logind, DropIn: e.DropIn}); err != nil {
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
