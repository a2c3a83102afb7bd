package dbustest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// Inhibit is one call to the fake logind's Inhibit and the lock it handed out: the write
// end of a pipe whose read end the fake watches, so a test sees exactly when the holder
// closes it (once DropOwnCopies has closed the fake's copy).
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

// HeldBy says whether process pid has the lock's write end open (the lock itself; the
// fake's read end, in this same process during tests, does not count).
func (i *Inhibit) HeldBy(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := fmt.Sprintf("pipe:[%d]", i.Inode)
	for _, e := range entries {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == want && writeEnd(pid, e.Name()) {
			return true
		}
	}
	return false
}

// writeEnd reads the fd's open flags from /proc/<pid>/fdinfo: O_WRONLY means the write end.
func writeEnd(pid int, fd string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_ACCMODE == syscall.O_WRONLY
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
		_, _ = io.Copy(io.Discard, r) // EOF once no write end is open anywhere
		// Close the read end before announcing: a caller woken by Closed must not still
		// find this pipe among the process's fds.
		_ = r.Close()
		in.closedAt = time.Now()
		close(in.closed)
	}()
	o.l.mu.Lock()
	defer o.l.mu.Unlock() // orders Fd before DropOwnCopies' Close for the race detector
	o.l.inhibits = append(o.l.inhibits, in)
	return dbus.UnixFD(w.Fd()), nil
}

type logindProps struct{ l *Logind }

func (o logindProps) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	if iface != LogindIface || name != "InhibitDelayMaxUSec" {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
	}
	return dbus.MakeVariant(uint64(o.l.Delay() / time.Microsecond)), nil
}

func (o logindProps) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != LogindIface {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{iface})
	}
	return map[string]dbus.Variant{"InhibitDelayMaxUSec": dbus.MakeVariant(uint64(o.l.Delay() / time.Microsecond))}, nil
}

// StartLogind connects to the bus at addr, exports the fake and takes logind's name; it
// reports InhibitDelayMaxUSec = delay.
func StartLogind(addr string, delay time.Duration) (*Logind, error) {
	conn, err := Connect(addr)
	if err != nil {
		return nil, fmt.Errorf("starting the fake logind: %w", err)
	}
	l := &Logind{conn: conn, delay: delay}
	if err := conn.Export(logindObj{l}, LogindPath, LogindIface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("exporting the fake logind: %w", err)
	}
	if err := conn.Export(logindProps{l}, LogindPath, propsIface); err != nil {
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

// Close drops logind's name (its connection goes away, as when logind exits) and the
// fake's copies of the locks.
func (l *Logind) Close() error {
	l.DropOwnCopies()
	return l.conn.Close()
}
