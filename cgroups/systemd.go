package cgroups

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	occgroups "github.com/opencontainers/cgroups"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// SystemdUnits is the part of systemd's D-Bus API the systemd driver calls. go-systemd's
// *dbus.Conn has these methods; tests pass a fake.
type SystemdUnits interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error)
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, props ...sddbus.Property) error
}

// systemd's D-Bus errors the driver tells apart.
const (
	dbusErrUnitExists = "org.freedesktop.systemd1.UnitExists"
	dbusErrNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// jobTimeout bounds the wait for systemd to finish a start or stop job; slices have no
// processes to start, so a job taking longer means systemd is stuck.
const jobTimeout = 30 * time.Second

// SliceName is the systemd unit of a cgroup: its leaf slice, e.g.
// "kubepods-burstable-pod<uid_>.slice"; the root is "-.slice".
func SliceName(name CgroupName) string {
	if len(name) == 0 {
		return "-.slice"
	}
	return path.Base(name.Systemd())
}

// podUIDFromSlice parses a pod slice directory found under the QoS cgroup parent back
// to the pod's UID: "kubepods-burstable-pod1234_abcd.slice" under kubepods/burstable
// is 1234-abcd (systemd unit names carry the UID's dashes as underscores).
func podUIDFromSlice(parent CgroupName, dir string) (types.UID, bool) {
	prefix := strings.TrimSuffix(SliceName(parent), ".slice") + "-" + podPrefix
	rest, ok := strings.CutPrefix(dir, prefix)
	if !ok {
		return "", false
	}
	uid, ok := strings.CutSuffix(rest, ".slice")
	if !ok || uid == "" || strings.Contains(uid, "-") {
		return "", false
	}
	return types.UID(strings.ReplaceAll(uid, "_", "-")), true
}

// sliceResourceProperties are rc as systemd unit properties for the host's layout, with
// the accounting that makes systemd enable the controllers.
func (m *Manager) sliceResourceProperties(rc ResourceConfig) []sddbus.Property {
	prop := func(name string, v any) sddbus.Property {
		return sddbus.Property{Name: name, Value: dbus.MakeVariant(v)}
	}
	props := []sddbus.Property{prop("CPUAccounting", true), prop("MemoryAccounting", true), prop("TasksAccounting", true)}
	v2 := m.opts.Mode == ModeV2
	if rc.CPUShares != nil {
		if v2 {
			props = append(props, prop("CPUWeight", occgroups.ConvertCPUSharesToCgroupV2Value(*rc.CPUShares)))
		} else {
			props = append(props, prop("CPUShares", *rc.CPUShares))
		}
	}
	if rc.CPUQuota != nil && rc.CPUPeriod != nil && *rc.CPUPeriod > 0 {
		props = append(props, prop("CPUQuotaPerSecUSec", quotaPerSecUSec(*rc.CPUQuota, *rc.CPUPeriod)))
		if v2 && *rc.CPUPeriod != DefaultCFSPeriod {
			props = append(props, prop("CPUQuotaPeriodUSec", *rc.CPUPeriod))
		}
	}
	if rc.Memory != nil {
		name := "MemoryLimit"
		if v2 {
			name = "MemoryMax"
		}
		props = append(props, prop(name, unitLimit(*rc.Memory)))
	}
	if rc.PidsLimit != nil {
		props = append(props, prop("TasksMax", unitLimit(*rc.PidsLimit)))
	}
	return props
}

// unitLimit is a limit as systemd takes it: the value, or infinity (max uint64).
func unitLimit(v int64) uint64 {
	if v <= 0 {
		return math.MaxUint64
	}
	return uint64(v)
}

// quotaPerSecUSec converts a CFS quota per period to systemd's CPU time per second,
// rounded up to whole 10ms: systemd keeps CPUQuota as a percentage, and a rounded-down
// parent would cap the exact value the manager then writes to cpu.max/cfs_quota_us.
// No quota is infinity.
func quotaPerSecUSec(quota int64, period uint64) uint64 {
	if quota <= 0 {
		return math.MaxUint64
	}
	perSec := uint64(quota) * 1000000 / period
	if rem := perSec % 10000; rem != 0 {
		perSec += 10000 - rem
	}
	return perSec
}

// ensureSlice starts the cgroup's slice as a transient unit with rc, or, when it is
// there already (a restart of nodelet), sets rc on it.
func (m *Manager) ensureSlice(ctx context.Context, name CgroupName, rc ResourceConfig) error {
	unit := SliceName(name)
	res := m.sliceResourceProperties(rc)
	props := []sddbus.Property{
		sddbus.PropDescription("nodelet QoS/pod cgroup " + unit),
		// A slice that only holds pods needs none of the default ordering against
		// shutdown.target and friends, which would delay the node's shutdown.
		{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)},
	}
	if len(name) > 1 {
		props = append(props, sddbus.PropWants(SliceName(name[:len(name)-1])))
	}
	props = append(props, res...)
	err := m.runJob(ctx, "starting", unit, func(ch chan<- string) error {
		_, err := m.opts.Systemd.StartTransientUnitContext(ctx, unit, "replace", props, ch)
		return err
	})
	if isDBusError(err, dbusErrUnitExists) {
		klog.FromContext(ctx).V(4).Info("Slice exists; updating its properties", "unit", unit)
		return m.setSliceProperties(ctx, name, rc)
	}
	return err
}

// setSliceProperties sets rc on the existing slice, for this boot only (runtime).
func (m *Manager) setSliceProperties(ctx context.Context, name CgroupName, rc ResourceConfig) error {
	unit := SliceName(name)
	if err := m.opts.Systemd.SetUnitPropertiesContext(ctx, unit, true, m.sliceResourceProperties(rc)...); err != nil {
		return fmt.Errorf("setting the properties of systemd unit %s: %w", unit, err)
	}
	return nil
}

// runJob runs one systemd job (start or stop) through call and waits for its result.
func (m *Manager) runJob(ctx context.Context, what, unit string, call func(ch chan<- string) error) error {
	// Buffered: go-systemd sends the result while holding its listener lock.
	ch := make(chan string, 1)
	if err := call(ch); err != nil {
		return fmt.Errorf("%s systemd unit %s: %w", what, unit, err)
	}
	timer := time.NewTimer(jobTimeout)
	defer timer.Stop()
	select {
	case result := <-ch:
		if result != "done" {
			return fmt.Errorf("%s systemd unit %s: job ended %q", what, unit, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s systemd unit %s: %w", what, unit, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("%s systemd unit %s: no job result within %s", what, unit, jobTimeout)
	}
}

// removeSlice stops the cgroup's slice, which makes systemd remove its cgroup, then
// removes what systemd does not manage (cpuset on v1, leftovers of the runtime in
// any hierarchy). Stopping a slice kills whatever runs in it, so it refuses while any
// process is left anywhere below it.
func (m *Manager) removeSlice(ctx context.Context, name CgroupName) error {
	dirs, err := m.allPaths(name)
	if err != nil {
		return fmt.Errorf("removing cgroup %s: %w", m.FsPath(name), err)
	}
	if err := refuseBusy(m.FsPath(name), dirs); err != nil {
		return err
	}
	unit := SliceName(name)
	err = m.runJob(ctx, "stopping", unit, func(ch chan<- string) error {
		_, err := m.opts.Systemd.StopUnitContext(ctx, unit, "replace", ch)
		return err
	})
	if err != nil && !isDBusError(err, dbusErrNoSuchUnit) {
		return err
	}
	if err := m.removeTrees(dirs); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Removed cgroup", "cgroup", m.FsPath(name), "unit", unit)
	return nil
}

func isDBusError(err error, name string) bool {
	var derr dbus.Error
	if errors.As(err, &derr) {
		return derr.Name == name
	}
	var pderr *dbus.Error
	return errors.As(err, &pderr) && pderr.Name == name
}
