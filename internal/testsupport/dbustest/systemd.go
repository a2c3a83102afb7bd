package dbustest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodelet/nodelet/internal/testsupport/cgroupfstest"
)

// SystemdOptions configure the fake systemd.
type SystemdOptions struct {
	// Logind and DropIn: KillUnit(systemd-logind.service, all, SIGHUP) does what the real
	// reload does and applies DropIn's [Login] InhibitDelayMaxSec to Logind. With a nil
	// Logind, KillUnit is only recorded (a logind that ignores the reload).
	Logind *Logind
	DropIn string
	// CgroupRoot is a temp dir shaped like /sys/fs/cgroup. A started slice gets its
	// directory there as systemd would create it (nested: a.slice/a-b.slice), and a
	// stopped one loses it. Empty: the fake touches no files.
	CgroupRoot string
	// Version is the Manager's Version property ("252-fake" if empty).
	Version string
	// SystemState is the Manager's SystemState property ("running" if empty).
	SystemState string
}

// KillUnitCall is one call to the fake systemd's KillUnit.
type KillUnitCall struct {
	Unit, Whom string
	Signal     int32
}

// Property is a unit property as go-systemd sends it (D-Bus signature (sv)).
type Property struct {
	Name  string
	Value dbus.Variant
}

// auxUnit is StartTransientUnit's auxiliary unit (sa(sv)); the fake ignores them.
type auxUnit struct {
	Name  string
	Props []Property
}

// UnitCall is one call to the fake's unit API, in the order received.
type UnitCall struct {
	// Method is StartTransientUnit, StopUnit or SetUnitProperties.
	Method string
	Unit   string
	// Mode is the job mode (StartTransientUnit, StopUnit).
	Mode string
	// Runtime is SetUnitProperties' runtime flag.
	Runtime bool
	Props   []Property
	// Err is the D-Bus error name the call was answered with, "" on success.
	Err string
}

// Unit is the fake's state of one unit.
type Unit struct {
	Name   string
	Active bool
	// Props are the properties from StartTransientUnit, updated by SetUnitProperties.
	Props map[string]dbus.Variant
}

// D-Bus errors systemd answers with.
const (
	ErrUnitExists = "org.freedesktop.systemd1.UnitExists"
	ErrNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// Systemd is the fake org.freedesktop.systemd1 on its own connection: KillUnit (logind's
// reload), the transient-unit calls of go-systemd's dbus package (StartTransientUnit,
// StopUnit, SetUnitProperties, each job ending with a JobRemoved signal) and the
// Manager's Version and SystemState properties.
type Systemd struct {
	conn *dbus.Conn
	opts SystemdOptions

	mu          sync.Mutex
	kills       []KillUnitCall
	calls       []UnitCall
	units       map[string]*Unit
	jobID       uint32
	nextResults map[string]string
}

type systemdObj struct{ s *Systemd }

var inhibitDelayRE = regexp.MustCompile(`(?ms)^\[Login\]$.*^InhibitDelayMaxSec=(\d+)$`)

func (o systemdObj) KillUnit(unit, whom string, signal int32) *dbus.Error {
	s := o.s
	s.mu.Lock()
	s.kills = append(s.kills, KillUnitCall{Unit: unit, Whom: whom, Signal: signal})
	s.mu.Unlock()
	if s.opts.Logind == nil || unit != "systemd-logind.service" || signal != int32(syscall.SIGHUP) {
		return nil
	}
	b, err := os.ReadFile(s.opts.DropIn)
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
	s.opts.Logind.SetDelay(time.Duration(n) * time.Second)
	return nil
}

func (o systemdObj) StartTransientUnit(name, mode string, props []Property, _ []auxUnit) (dbus.ObjectPath, *dbus.Error) {
	s := o.s
	s.mu.Lock()
	call := UnitCall{Method: "StartTransientUnit", Unit: name, Mode: mode, Props: props}
	if u, ok := s.units[name]; ok && u.Active {
		call.Err = ErrUnitExists
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		return "", dbus.NewError(ErrUnitExists, []any{fmt.Sprintf("Unit %s was already loaded or has a fragment file.", name)})
	}
	s.calls = append(s.calls, call)
	result := s.takeResult(name)
	if result == "done" {
		u := &Unit{Name: name, Active: true, Props: map[string]dbus.Variant{}}
		for _, p := range props {
			u.Props[p.Name] = p.Value
		}
		s.units[name] = u
	}
	s.mu.Unlock()
	if result == "done" {
		if err := s.makeDirs(name); err != nil {
			return "", dbus.MakeFailedError(err)
		}
	}
	return s.finishJob(name, result)
}

func (o systemdObj) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	s := o.s
	s.mu.Lock()
	call := UnitCall{Method: "StopUnit", Unit: name, Mode: mode}
	u, ok := s.units[name]
	if !ok {
		call.Err = ErrNoSuchUnit
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		return "", dbus.NewError(ErrNoSuchUnit, []any{fmt.Sprintf("Unit %s not loaded.", name)})
	}
	s.calls = append(s.calls, call)
	result := s.takeResult(name)
	if result == "done" {
		// A stopped transient unit is garbage-collected.
		u.Active = false
		delete(s.units, name)
	}
	s.mu.Unlock()
	if result == "done" {
		if err := s.removeDirs(name); err != nil {
			return "", dbus.MakeFailedError(err)
		}
	}
	return s.finishJob(name, result)
}

func (o systemdObj) SetUnitProperties(name string, runtime bool, props []Property) *dbus.Error {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	call := UnitCall{Method: "SetUnitProperties", Unit: name, Runtime: runtime, Props: props}
	u, ok := s.units[name]
	if !ok {
		call.Err = ErrNoSuchUnit
		s.calls = append(s.calls, call)
		return dbus.NewError(ErrNoSuchUnit, []any{fmt.Sprintf("Unit %s not loaded.", name)})
	}
	s.calls = append(s.calls, call)
	for _, p := range props {
		u.Props[p.Name] = p.Value
	}
	return nil
}

// takeResult is the result of the next job on unit: "done" unless FailNextJob said
// otherwise. Called with s.mu held.
func (s *Systemd) takeResult(unit string) string {
	if r, ok := s.nextResults[unit]; ok {
		delete(s.nextResults, unit)
		return r
	}
	return "done"
}

// finishJob hands out a job path and announces the job's end. The signal may reach the
// client before the reply does; go-systemd registers its listener under a lock held over
// the call, so it still finds the job.
func (s *Systemd) finishJob(unit, result string) (dbus.ObjectPath, *dbus.Error) {
	s.mu.Lock()
	s.jobID++
	id := s.jobID
	s.mu.Unlock()
	job := dbus.ObjectPath(fmt.Sprintf("%s/job/%d", SystemdPath, id))
	if err := s.conn.Emit(SystemdPath, SystemdIface+".JobRemoved", id, job, unit, result); err != nil {
		return "", dbus.MakeFailedError(err)
	}
	return job, nil
}

type systemdProps struct{ s *Systemd }

func (o systemdProps) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	v, ok := o.s.managerProps()[name]
	if iface != SystemdIface || !ok {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
	}
	return v, nil
}

func (o systemdProps) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != SystemdIface {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{iface})
	}
	return o.s.managerProps(), nil
}

// managerProps are the Manager properties the fake has: Version and SystemState.
func (s *Systemd) managerProps() map[string]dbus.Variant {
	version, state := s.opts.Version, s.opts.SystemState
	if version == "" {
		version = "252-fake"
	}
	if state == "" {
		state = "running"
	}
	return map[string]dbus.Variant{"Version": dbus.MakeVariant(version), "SystemState": dbus.MakeVariant(state)}
}

// StartSystemd exports the fake systemd on its own connection to addr and takes systemd's
// name.
func StartSystemd(addr string, opts SystemdOptions) (*Systemd, error) {
	conn, err := Connect(addr)
	if err != nil {
		return nil, fmt.Errorf("starting the fake systemd: %w", err)
	}
	s := &Systemd{conn: conn, opts: opts, units: map[string]*Unit{}, nextResults: map[string]string{}}
	if err := conn.Export(systemdObj{s}, SystemdPath, SystemdIface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("exporting the fake systemd: %w", err)
	}
	if err := conn.Export(systemdProps{s}, SystemdPath, propsIface); err != nil {
		conn.Close()
		return nil, fmt.Errorf("exporting the fake systemd's properties: %w", err)
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

// UnitCalls are the unit API calls so far, oldest first.
func (s *Systemd) UnitCalls() []UnitCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]UnitCall(nil), s.calls...)
}

// Unit returns a copy of the unit's state, false when it is not loaded.
func (s *Systemd) Unit(name string) (Unit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.units[name]
	if !ok {
		return Unit{}, false
	}
	c := Unit{Name: u.Name, Active: u.Active, Props: map[string]dbus.Variant{}}
	for k, v := range u.Props {
		c.Props[k] = v
	}
	return c, true
}

// FailNextJob makes the next job on unit end with result (e.g. "failed", "timeout")
// instead of "done"; such a job changes nothing.
func (s *Systemd) FailNextJob(unit, result string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextResults[unit] = result
}

// Close closes the fake's connection (systemd's name goes away).
func (s *Systemd) Close() error { return s.conn.Close() }

// SlicePath expands a slice unit name to its cgroup path, as systemd nests slices:
// "a-b-c.slice" is "a.slice/a-b.slice/a-b-c.slice"; "-.slice" is the root (""). Other
// unit names give "".
func SlicePath(unit string) string {
	base, ok := strings.CutSuffix(unit, ".slice")
	if !ok || base == "-" || base == "" {
		return ""
	}
	var parts []string
	prefix := ""
	for _, c := range strings.Split(base, "-") {
		if prefix != "" {
			prefix += "-"
		}
		prefix += c
		parts = append(parts, prefix+".slice")
	}
	return filepath.Join(parts...)
}

// hierarchies are the directories a unit's cgroup goes into: the root on cgroup v2; on
// v1 every hierarchy but cpuset, which systemd does not manage (the caller must create
// that one itself, as runc does).
func (s *Systemd) hierarchies() ([]string, error) {
	root := s.opts.CgroupRoot
	if root == "" {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return []string{root}, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("listing the fake cgroup hierarchies: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "cpuset" {
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	return out, nil
}

func (s *Systemd) makeDirs(unit string) error {
	p := SlicePath(unit)
	if p == "" {
		return nil
	}
	hs, err := s.hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := cgroupfstest.MkdirAll(filepath.Join(h, p)); err != nil {
			return fmt.Errorf("creating the cgroup of %s: %w", unit, err)
		}
	}
	return nil
}

func (s *Systemd) removeDirs(unit string) error {
	p := SlicePath(unit)
	if p == "" {
		return nil
	}
	hs, err := s.hierarchies()
	if err != nil {
		return err
	}
	// The fake tree's directories hold regular files, which rmdir would refuse.
	for _, h := range hs {
		if err := os.RemoveAll(filepath.Join(h, p)); err != nil {
			return fmt.Errorf("removing the cgroup of %s: %w", unit, err)
		}
	}
	return nil
}
