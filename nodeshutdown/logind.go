package nodeshutdown

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

const (
	logindService = "org.freedesktop.login1"
	logindPath    = dbus.ObjectPath("/org/freedesktop/login1")
	logindIface   = "org.freedesktop.login1.Manager"

	systemdService = "org.freedesktop.systemd1"
	systemdPath    = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface   = "org.freedesktop.systemd1.Manager"

	dbusService = "org.freedesktop.DBus"
	dbusPath    = dbus.ObjectPath("/org/freedesktop/DBus")
	dbusIface   = "org.freedesktop.DBus"

	// DefaultDropInPath is where nodelet raises logind's InhibitDelayMaxSec.
	DefaultDropInPath = "/etc/systemd/logind.conf.d/99-nodelet.conf"

	defaultReloadTimeout = 3 * time.Second
	reloadPollInterval   = 100 * time.Millisecond
	reconnectPeriod      = time.Second
)

// InhibitorOptions configures an Inhibitor.
type InhibitorOptions struct {
	// BusAddress is a D-Bus address such as unix:path=/run/dbus/system_bus_socket; empty
	// means the system bus.
	BusAddress string
	// DropInPath is the logind drop-in nodelet writes; default DefaultDropInPath.
	DropInPath string
	// ReloadTimeout bounds the wait for logind to apply the drop-in after SIGHUP.
	ReloadTimeout time.Duration
	Clock         clock.Clock
	// Registerer, when set, gets gauges saying whether logind gives nodelet the time it needs.
	Registerer prometheus.Registerer
}

// Inhibitor holds logind's delay inhibitor lock for shutdown, raises InhibitDelayMaxSec when
// it is too small, and reports PrepareForShutdown. It takes the lock again when logind
// restarts, and reconnects when the bus itself goes away.
type Inhibitor struct {
	addr          string
	dropIn        string
	reloadTimeout time.Duration
	clock         clock.Clock

	events chan bool
	stop   chan struct{}
	done   chan struct{}

	delayMax    prometheus.Gauge
	delayWanted prometheus.Gauge
	held        prometheus.Gauge

	mu     sync.Mutex
	conn   *dbus.Conn
	owner  string   // logind's unique bus name: only it may announce a shutdown
	lock   *os.File // nil when not held
	wanted bool     // Acquire called and not Released: re-take after a logind restart
}

// NewInhibitor connects to the bus and starts watching logind. It fails only when the bus
// cannot be reached; a bus without logind yet is watched until logind appears.
func NewInhibitor(opts InhibitorOptions) (*Inhibitor, error) {
	i := &Inhibitor{
		addr:          opts.BusAddress,
		dropIn:        opts.DropInPath,
		reloadTimeout: opts.ReloadTimeout,
		clock:         opts.Clock,
		events:        make(chan bool, 16),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	if i.dropIn == "" {
		i.dropIn = DefaultDropInPath
	}
	if i.reloadTimeout <= 0 {
		i.reloadTimeout = defaultReloadTimeout
	}
	if i.clock == nil {
		i.clock = clock.RealClock{}
	}
	i.delayMax = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "nodelet", Name: "shutdown_inhibit_delay_max_seconds",
		Help: "logind's InhibitDelayMaxSec as last read: the longest logind waits for nodelet at shutdown",
	})
	i.delayWanted = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "nodelet", Name: "shutdown_inhibit_delay_wanted_seconds",
		Help: "The shutdown grace nodelet needs from logind; above shutdown_inhibit_delay_max_seconds, pods will be cut short",
	})
	i.held = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "nodelet", Name: "shutdown_inhibitor_lock_held",
		Help: "1 while nodelet holds logind's shutdown delay inhibitor lock",
	})
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{i.delayMax, i.delayWanted, i.held} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("registering shutdown inhibitor metrics: %w", err)
			}
		}
	}
	signals, err := i.connect()
	if err != nil {
		return nil, err
	}
	go i.run(signals)
	return i, nil
}

// connect dials the bus, subscribes to the signals and learns logind's current owner.
func (i *Inhibitor) connect() (chan *dbus.Signal, error) {
	var conn *dbus.Conn
	var err error
	if i.addr == "" {
		conn, err = dbus.ConnectSystemBus()
	} else {
		conn, err = dbus.Connect(i.addr)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to D-Bus %q: %w", i.addrName(), err)
	}
	if !conn.SupportsUnixFDs() {
		conn.Close()
		return nil, fmt.Errorf("D-Bus connection %q cannot pass file descriptors, so no inhibitor lock can be held", i.addrName())
	}
	matches := [][]dbus.MatchOption{
		{dbus.WithMatchObjectPath(logindPath), dbus.WithMatchInterface(logindIface), dbus.WithMatchMember("PrepareForShutdown")},
		{dbus.WithMatchSender(dbusService), dbus.WithMatchInterface(dbusIface), dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, logindService)},
	}
	for _, m := range matches {
		if err := conn.AddMatchSignal(m...); err != nil {
			conn.Close()
			return nil, fmt.Errorf("subscribing to logind signals on %q: %w", i.addrName(), err)
		}
	}
	signals := make(chan *dbus.Signal, 16)
	conn.Signal(signals)

	var owner string
	if err := conn.BusObject().Call(dbusIface+".GetNameOwner", 0, logindService).Store(&owner); err != nil {
		klog.InfoS("logind is not on the bus yet; waiting for it", "bus", i.addrName(), "err", err)
		owner = ""
	}
	i.mu.Lock()
	i.conn, i.owner = conn, owner
	i.mu.Unlock()
	return signals, nil
}

func (i *Inhibitor) addrName() string {
	if i.addr == "" {
		return "system bus"
	}
	return i.addr
}

// Events delivers PrepareForShutdown: true when a shutdown starts, false when it is cancelled.
func (i *Inhibitor) Events() <-chan bool { return i.events }

func (i *Inhibitor) run(signals chan *dbus.Signal) {
	defer close(i.done)
	for {
		for sig := range signals {
			if !i.handle(sig) {
				return
			}
		}
		select {
		case <-i.stop: // Close closed the connection: nothing was lost.
			return
		default:
		}
		// The channel closes with the connection: the bus went away.
		i.mu.Lock()
		i.dropLockLocked()
		i.owner = ""
		i.mu.Unlock()
		klog.InfoS("Lost the D-Bus connection to logind; reconnecting", "bus", i.addrName(), "period", reconnectPeriod)
		for {
			select {
			case <-i.stop:
				return
			case <-i.clock.After(reconnectPeriod):
			}
			var err error
			if signals, err = i.connect(); err != nil {
				klog.V(2).InfoS("D-Bus reconnect failed", "err", err)
				continue
			}
			i.mu.Lock()
			select {
			case <-i.stop: // Close ran while we dialled: it could not see this connection.
				i.conn.Close()
				i.mu.Unlock()
				return
			default:
			}
			if i.wanted && i.owner != "" {
				if err := i.acquireLocked(context.Background()); err != nil {
					klog.ErrorS(err, "Failed to take logind's inhibitor lock again after reconnecting")
				}
			}
			i.mu.Unlock()
			break
		}
	}
}

// handle returns false when the inhibitor is stopping.
func (i *Inhibitor) handle(sig *dbus.Signal) bool {
	switch sig.Name {
	case logindIface + ".PrepareForShutdown":
		i.mu.Lock()
		owner := i.owner
		i.mu.Unlock()
		// Anyone may emit a signal on the bus; only logind's may stop every pod.
		if sig.Path != logindPath || owner == "" || sig.Sender != owner {
			klog.InfoS("Ignoring PrepareForShutdown not sent by logind", "sender", sig.Sender, "logind", owner)
			return true
		}
		active, ok := bodyBool(sig.Body)
		if !ok {
			klog.InfoS("Ignoring malformed PrepareForShutdown", "body", sig.Body)
			return true
		}
		klog.InfoS("logind announced PrepareForShutdown", "active", active)
		select {
		case i.events <- active:
		case <-i.stop:
			return false
		}
	case dbusIface + ".NameOwnerChanged":
		if len(sig.Body) != 3 {
			return true
		}
		name, _ := sig.Body[0].(string)
		newOwner, _ := sig.Body[2].(string)
		if name != logindService {
			return true
		}
		i.mu.Lock()
		defer i.mu.Unlock()
		// Already known from GetNameOwner at (re)connect, and the lock taken from it.
		if newOwner == i.owner {
			return true
		}
		i.owner = newOwner
		// A lock from the old logind means nothing to the new one.
		i.dropLockLocked()
		if newOwner == "" {
			klog.InfoS("logind left the bus; the shutdown inhibitor lock is gone until it returns")
			return true
		}
		if i.wanted {
			if err := i.acquireLocked(context.Background()); err != nil {
				klog.ErrorS(err, "Failed to take logind's inhibitor lock again after logind restarted")
			} else {
				klog.InfoS("logind restarted; took the shutdown inhibitor lock again", "logind", newOwner)
			}
		}
	}
	return true
}

func bodyBool(body []any) (bool, bool) {
	if len(body) != 1 {
		return false, false
	}
	b, ok := body[0].(bool)
	return b, ok
}

func (i *Inhibitor) logind() (dbus.BusObject, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.conn == nil {
		return nil, errors.New("not connected to D-Bus")
	}
	return i.conn.Object(logindService, logindPath), nil
}

// InhibitDelayMax reads logind's InhibitDelayMaxUSec: the longest logind waits for a delay lock.
func (i *Inhibitor) InhibitDelayMax(ctx context.Context) (time.Duration, error) {
	obj, err := i.logind()
	if err != nil {
		return 0, err
	}
	var v dbus.Variant
	if err := obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, logindIface, "InhibitDelayMaxUSec").Store(&v); err != nil {
		return 0, fmt.Errorf("reading logind's InhibitDelayMaxUSec: %w", err)
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("reading logind's InhibitDelayMaxUSec: got %s, want uint64", v.Signature())
	}
	d := time.Duration(usec) * time.Microsecond
	i.delayMax.Set(d.Seconds())
	return d, nil
}

// DelayCheck is what EnsureInhibitDelay found and did.
type DelayCheck struct {
	Wanted, Before, After time.Duration
	// WroteDropIn says the drop-in was written and logind asked to reload.
	WroteDropIn bool
	DropInPath  string
	// Overrides are drop-ins beside nodelet's that sort after it and set InhibitDelayMaxSec:
	// logind applies them last, so they win.
	Overrides []string
}

// OK says logind will wait long enough.
func (c DelayCheck) OK() bool { return c.After >= c.Wanted }

// EnsureInhibitDelay makes logind's InhibitDelayMaxSec at least want: when it is smaller it
// writes the drop-in, sends logind SIGHUP through systemd and reads the value again. A value
// still too small is no error: the caller must warn with both numbers.
func (i *Inhibitor) EnsureInhibitDelay(ctx context.Context, want time.Duration) (DelayCheck, error) {
	c := DelayCheck{Wanted: want, DropInPath: i.dropIn}
	i.delayWanted.Set(want.Seconds())
	before, err := i.InhibitDelayMax(ctx)
	if err != nil {
		return c, err
	}
	c.Before, c.After = before, before
	if before >= want {
		return c, nil
	}
	secs := int64((want + time.Second - 1) / time.Second)
	if err := writeDropIn(i.dropIn, secs); err != nil {
		return c, err
	}
	c.WroteDropIn = true
	if err := i.reloadLogind(ctx); err != nil {
		return c, err
	}
	deadline := i.clock.Now().Add(i.reloadTimeout)
	for {
		after, err := i.InhibitDelayMax(ctx)
		if err != nil {
			return c, err
		}
		c.After = after
		if after >= want || !i.clock.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("waiting for logind to apply %s: %w", i.dropIn, ctx.Err())
		case <-i.clock.After(reloadPollInterval):
		}
	}
	if !c.OK() {
		c.Overrides = overridingDropIns(i.dropIn)
	}
	return c, nil
}

func writeDropIn(path string, secs int64) error {
	content := fmt.Sprintf("# Written by nodelet: the time it needs to stop pods at shutdown.\n[Login]\nInhibitDelayMaxSec=%d\n", secs)
	if err := atomicfile.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing logind drop-in: %w", err)
	}
	return nil
}

// reloadLogind sends logind SIGHUP the way systemd does it for a unit, which re-reads logind.conf.
func (i *Inhibitor) reloadLogind(ctx context.Context) error {
	i.mu.Lock()
	conn := i.conn
	i.mu.Unlock()
	if conn == nil {
		return errors.New("reloading logind: not connected to D-Bus")
	}
	call := conn.Object(systemdService, systemdPath).CallWithContext(ctx, systemdIface+".KillUnit", 0, "systemd-logind.service", "all", int32(1))
	if call.Err != nil {
		return fmt.Errorf("reloading logind (KillUnit systemd-logind.service SIGHUP): %w", call.Err)
	}
	return nil
}

// overridingDropIns lists drop-ins that sort after nodelet's and set InhibitDelayMaxSec: logind
// merges the drop-in directories and applies files by name, so these win (kubernetes#102818).
// With the default path, logind's other drop-in directories are searched too.
func overridingDropIns(path string) []string {
	dirs := []string{filepath.Dir(path)}
	if path == DefaultDropInPath {
		dirs = append(dirs, "/run/systemd/logind.conf.d", "/usr/local/lib/systemd/logind.conf.d", "/usr/lib/systemd/logind.conf.d")
	}
	base := filepath.Base(path)
	var out []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".conf") || e.Name() <= base {
				continue
			}
			if setsInhibitDelay(filepath.Join(dir, e.Name())) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}

func setsInhibitDelay(file string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "InhibitDelayMaxSec") {
			return true
		}
	}
	return false
}

// Acquire takes the delay inhibitor lock for shutdown, unless already held. Until Release it
// is taken again whenever logind (re)appears, even when this first attempt fails.
func (i *Inhibitor) Acquire(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.wanted = true
	return i.acquireLocked(ctx)
}

func (i *Inhibitor) acquireLocked(ctx context.Context) error {
	if i.lock != nil {
		return nil
	}
	if i.conn == nil {
		return errors.New("taking logind's inhibitor lock: not connected to D-Bus")
	}
	var fd dbus.UnixFD
	err := i.conn.Object(logindService, logindPath).CallWithContext(ctx, logindIface+".Inhibit", 0,
		"shutdown", "nodelet", "nodelet needs time to stop pods gracefully", "delay").Store(&fd)
	if err != nil {
		return fmt.Errorf("taking logind's delay inhibitor lock for shutdown: %w", err)
	}
	i.lock = os.NewFile(uintptr(fd), "logind-inhibitor")
	i.held.Set(1)
	return nil
}

// dropLockLocked closes the lock's fd; logind lets the shutdown proceed once it is closed.
func (i *Inhibitor) dropLockLocked() {
	if i.lock != nil {
		if err := i.lock.Close(); err != nil {
			klog.ErrorS(err, "Closing logind's inhibitor lock")
		}
		i.lock = nil
	}
	i.held.Set(0)
}

// Held says whether nodelet holds the lock now.
func (i *Inhibitor) Held() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.lock != nil
}

// Release lets logind go on with the shutdown; the lock is not taken again until Acquire.
func (i *Inhibitor) Release() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.wanted = false
	i.dropLockLocked()
}

// Close releases the lock, stops watching and closes the connection.
func (i *Inhibitor) Close() error {
	i.Release()
	close(i.stop)
	i.mu.Lock()
	conn := i.conn
	i.mu.Unlock()
	var err error
	if conn != nil {
		err = conn.Close()
	}
	<-i.done
	return err
}
