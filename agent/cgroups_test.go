package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/internal/testsupport/dbustest"
)

type fakeRuntimeConfig struct {
	config    *runtimeapi.RuntimeConfigResponse // nil: Unimplemented, as containerd 1.6
	info      map[string]string                 // verbose status info
	statusErr error
}

func (f *fakeRuntimeConfig) RuntimeConfig(context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	if f.config == nil {
		return nil, status.Error(codes.Unimplemented, "unknown method RuntimeConfig for service runtime.v1.RuntimeService")
	}
	return f.config, nil
}

func (f *fakeRuntimeConfig) Status(_ context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	resp := &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{}}
	if verbose {
		resp.Info = f.info
	}
	return resp, nil
}

// containerd16Config is the shape of containerd 1.6's verbose status config (see
// cgroups/testdata for the captured payload).
const containerd16Config = `{"containerd":{"defaultRuntimeName":"runc","defaultRuntime":{"runtimeType":"","options":null},
"runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":true}}}},"systemdCgroup":false}`

func TestRuntimeCgroupDriver(t *testing.T) {
	linux := func(d runtimeapi.CgroupDriver) *runtimeapi.RuntimeConfigResponse {
		return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}
	}
	tests := []struct {
		name       string
		rt         *fakeRuntimeConfig
		want       string
		wantSource string
	}{
		{"RuntimeConfig cgroupfs wins over status", &fakeRuntimeConfig{config: linux(runtimeapi.CgroupDriver_CGROUPFS), info: map[string]string{"config": containerd16Config}}, "cgroupfs", "RuntimeConfig"},
		{"RuntimeConfig systemd", &fakeRuntimeConfig{config: linux(runtimeapi.CgroupDriver_SYSTEMD)}, "systemd", "RuntimeConfig"},
		{"containerd 1.6: verbose status", &fakeRuntimeConfig{info: map[string]string{"config": containerd16Config}}, "systemd", "verbose Status"},
		{"RuntimeConfig without linux section falls back", &fakeRuntimeConfig{config: &runtimeapi.RuntimeConfigResponse{}, info: map[string]string{"config": strings.Replace(containerd16Config, "true", "false", 1)}}, "cgroupfs", "verbose Status"},
		{"neither tells", &fakeRuntimeConfig{info: map[string]string{}}, "", ""},
		{"status fails", &fakeRuntimeConfig{statusErr: errors.New("down")}, "", ""},
	}
	for _, tt := range tests {
		got, source := runtimeCgroupDriver(context.Background(), tt.rt)
		if got != tt.want || !strings.HasPrefix(source, tt.wantSource) {
			t.Errorf("%s: runtimeCgroupDriver = %q (%q), want %q (%q...)", tt.name, got, source, tt.want, tt.wantSource)
		}
	}
	// What setUpCgroups then does with a containerd 1.6 on systemd and nodelet on cgroupfs.
	got, _ := runtimeCgroupDriver(context.Background(), &fakeRuntimeConfig{info: map[string]string{"config": containerd16Config}})
	err := cgroups.CheckDriver("cgroupfs", got)
	if err == nil || !strings.Contains(err.Error(), `"cgroupfs"`) || !strings.Contains(err.Error(), `"systemd"`) {
		t.Errorf("CheckDriver = %v, want a mismatch naming both drivers", err)
	}
}

func TestCheckCgroupRoot(t *testing.T) {
	tests := []struct {
		root    string
		driver  cgroups.Driver
		wantErr bool
	}{
		{"", cgroups.DriverSystemd, false},
		{"/", cgroups.DriverSystemd, false},
		{"nodes.slice", cgroups.DriverSystemd, false},
		{"/nodes.slice/nodes-a.slice", cgroups.DriverSystemd, false},
		{"/nodelet", cgroups.DriverSystemd, true},
		{"/nodelet", cgroups.DriverCgroupfs, false},
	}
	for _, tt := range tests {
		if err := checkCgroupRoot(tt.root, tt.driver); (err != nil) != tt.wantErr {
			t.Errorf("checkCgroupRoot(%q, %s) = %v, want error %v", tt.root, tt.driver, err, tt.wantErr)
		}
	}
}

func TestOpenSystemd(t *testing.T) {
	bus := dbustest.NewBus(t)
	dial := func(context.Context) (systemdConn, error) {
		c, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dbustest.Connect(bus.Addr) })
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	const need = "cgroupDriver systemd needs systemd as the init system"
	ctx := context.Background()

	// A bus without systemd on it.
	if _, _, err := openSystemd(ctx, dial); err == nil || !strings.Contains(err.Error(), need) || !strings.Contains(err.Error(), "cgroupDriver: cgroupfs") {
		t.Fatalf("openSystemd without systemd = %v, want the start-up error saying what is needed", err)
	}
	// No bus at all.
	noBus := func(context.Context) (systemdConn, error) {
		return nil, errors.New("dial unix /run/systemd/private: connect: no such file or directory")
	}
	if _, _, err := openSystemd(ctx, noBus); err == nil || !strings.Contains(err.Error(), need) || !strings.Contains(err.Error(), "/run/systemd/private") {
		t.Fatalf("openSystemd with no bus = %v, want the start-up error with the cause", err)
	}

	sd, err := dbustest.StartSystemd(bus.Addr, dbustest.SystemdOptions{SystemState: "degraded"})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	conn, state, err := openSystemd(ctx, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if state != "degraded" {
		t.Errorf("system state = %q, want degraded", state)
	}
}
