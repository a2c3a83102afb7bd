package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// The upstream sample device plugin (k8s.io/kubernetes/test/images/sample-device-plugin,
// built by test/rig/build-bins.sh): it advertises SampleDevices of SampleDeviceResource,
// healthy and without topology, and its Allocate answers each device ID with a bind mount of
// the host file /tmp/<ID> (which it creates, empty) at the same path in the container; no env,
// no device nodes, CDI devices only with CDI_ENABLED, which the framework does not set.
const (
	SampleDeviceResource = "example.com/resource"
	// upstreamDevicePluginDir is where the plugin dials kubelet.sock and watches for it to be
	// created again (pluginapi.DevicePluginPath, fixed in the plugin).
	upstreamDevicePluginDir = "/var/lib/kubelet/device-plugins"
)

// SampleDevices are the sample device plugin's device IDs.
func SampleDevices() []string { return []string{"Dev-1", "Dev-2"} }

// SampleDevicePlugin is the upstream sample device plugin running as a host process for one
// node agent.
type SampleDevicePlugin struct {
	Dir string // its log
	f   *Framework
	n   *Nodelet
	bin string
	p   *hostProc
}

// StartSampleDevicePlugin starts the sample device plugin for n; it registers at once. The
// plugin dials /var/lib/kubelet/device-plugins/kubelet.sock whatever PLUGIN_SOCK_DIR says and
// re-registers only when it sees kubelet.sock created under that very path, so it runs in a
// mount namespace of its own where n's device plugin directory is bind-mounted there (the
// host's directory is not touched; an empty one is created if missing, as a mount point).
// At cleanup it is stopped and the device files it made in /tmp are removed.
func (f *Framework) StartSampleDevicePlugin(n *Nodelet) *SampleDevicePlugin {
	f.T.Helper()
	dir, err := os.MkdirTemp("", "sample-dp-")
	if err != nil {
		f.T.Fatalf("creating the sample device plugin's dir: %v", err)
	}
	p := &SampleDevicePlugin{Dir: dir, f: f, n: n, bin: f.RigBin("sample-device-plugin")}
	f.T.Cleanup(p.cleanup)
	if err := os.MkdirAll(upstreamDevicePluginDir, 0o755); err != nil {
		f.T.Fatalf("creating the mount point %s: %v", upstreamDevicePluginDir, err)
	}
	p.Start()
	return p
}

// Start starts the plugin process (after Stop).
func (p *SampleDevicePlugin) Start() {
	p.f.T.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$1" "$2" && exec "$3"`, "sh",
		filepath.Join(p.n.RootDir, "device-plugins"), upstreamDevicePluginDir, p.bin)
	cmd.Env = append(os.Environ(), "PLUGIN_SOCK_DIR="+upstreamDevicePluginDir)
	proc, err := startHostProc("sample-device-plugin", filepath.Join(p.Dir, "plugin.log"), cmd)
	if err != nil {
		p.f.T.Fatal(err)
	}
	p.p = proc
}

// Stop stops the plugin (SIGTERM: it removes its socket, and nodelet's stream from it ends).
func (p *SampleDevicePlugin) Stop() {
	p.f.T.Helper()
	if p.p == nil {
		return
	}
	if err := p.p.exited(); err != nil {
		p.f.T.Errorf("before Stop: %v", err)
	}
	_ = p.p.cmd.Process.Signal(syscall.SIGTERM)
	if p.p.wait(15 * time.Second) {
		p.f.T.Errorf("the sample device plugin did not exit within 15s of SIGTERM; killed it")
	}
	p.p = nil
}

// Check is an error if the plugin is stopped or has exited (it panics when a registration
// fails).
func (p *SampleDevicePlugin) Check() error {
	if p.p == nil {
		return fmt.Errorf("the sample device plugin is stopped")
	}
	return p.p.exited()
}

func (p *SampleDevicePlugin) cleanup() {
	t := p.f.T
	if p.p != nil {
		_ = p.p.cmd.Process.Signal(syscall.SIGTERM)
		p.p.wait(15 * time.Second)
	}
	for _, d := range SampleDevices() {
		_ = os.Remove(filepath.Join("/tmp", d))
	}
	if t.Failed() {
		t.Logf("sample device plugin log: %s", filepath.Join(p.Dir, "plugin.log"))
		return
	}
	_ = os.RemoveAll(p.Dir)
}
