package hostsetup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/klog/v2"
)

// ProcSysDir is where the kernel's tunables are read and written.
const ProcSysDir = "/proc/sys"

// KernelTunable is a kernel setting the kubelet expects, with its value.
type KernelTunable struct {
	Name string // under /proc/sys, slash-separated as upstream names them
	Want int
}

// KernelTunables are the settings upstream's kubelet checks at start: no memory
// overcommit heuristics, the OOM killer instead of a panic on OOM, a reboot 10s
// after a panic, a panic on oops, and room for the keys containers create.
func KernelTunables() []KernelTunable {
	return []KernelTunable{
		{utilsysctl.VMOvercommitMemory, utilsysctl.VMOvercommitMemoryAlways},
		{utilsysctl.VMPanicOnOOM, utilsysctl.VMPanicOnOOMInvokeOOMKiller},
		{utilsysctl.KernelPanic, utilsysctl.KernelPanicRebootTimeout},
		{utilsysctl.KernelPanicOnOops, utilsysctl.KernelPanicOnOopsAlways},
		{utilsysctl.RootMaxKeys, utilsysctl.RootMaxKeysSetting},
		{utilsysctl.RootMaxBytes, utilsysctl.RootMaxBytesSetting},
	}
}

// kernelTunableAction is what to do about one tunable: nothing, set it, or refuse
// (with protectKernelDefaults) with upstream's words.
func kernelTunableAction(t KernelTunable, actual int, protect bool) (set bool, err error) {
	switch {
	case actual == t.Want:
		return false, nil
	case protect:
		return false, fmt.Errorf("invalid kernel flag: %v, expected value: %v, actual value: %v", t.Name, t.Want, actual)
	default:
		return true, nil
	}
}

// sysctlFiles reads and writes tunables as files under root (/proc/sys; a temp
// dir in tests).
type sysctlFiles struct{ root string }

func (s sysctlFiles) get(name string) (int, error) {
	data, err := os.ReadFile(filepath.Join(s.root, name))
	if err != nil {
		return 0, fmt.Errorf("reading kernel flag %s: %w", name, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("reading kernel flag %s: %w", name, err)
	}
	return v, nil
}

func (s sysctlFiles) set(name string, v int) error {
	if err := os.WriteFile(filepath.Join(s.root, name), []byte(strconv.Itoa(v)), 0o640); err != nil {
		return fmt.Errorf("setting kernel flag %s to %d: %w", name, v, err)
	}
	return nil
}

// SetUpKernelTunables checks the kernel tunables under root as upstream does at
// start: with protectKernelDefaults a value that differs stops the start, naming
// every such flag; without it nodelet sets them. A flag it cannot read or set
// stops the start too, as upstream.
func SetUpKernelTunables(ctx context.Context, root string, protect bool) error {
	logger := klog.FromContext(ctx)
	fs := sysctlFiles{root: root}
	var errs []error
	for _, t := range KernelTunables() {
		actual, err := fs.get(t.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		set, err := kernelTunableAction(t, actual, protect)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !set {
			continue
		}
		logger.V(2).Info("Updating kernel flag", "flag", t.Name, "expectedValue", t.Want, "actualValue", actual)
		if err := fs.set(t.Name, t.Want); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	if protect {
		return fmt.Errorf("protectKernelDefaults is true and the kernel differs from the kubelet's defaults (set them, e.g. in /etc/sysctl.d, or set protectKernelDefaults: false to let nodelet set them): %w", errors.Join(errs...))
	}
	return fmt.Errorf("setting the kernel flags the kubelet needs (protectKernelDefaults is false): %w", errors.Join(errs...))
}
