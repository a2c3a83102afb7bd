package dbustest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

func TestBusInDirNeedingEscapes(t *testing.T) {
	if got, want := escapeAddrValue("/tmp/Test/v2=true,x/bus"), "/tmp/Test/v2%3dtrue%2cx/bus"; got != want {
		t.Errorf("escapeAddrValue = %q, want %q", got, want)
	}
	dir := filepath.Join(t.TempDir(), "a=b,c")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := StartBus(dir)
	if errors.Is(err, ErrNoDaemon) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := Connect(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestSlicePath(t *testing.T) {
	for _, tt := range []struct{ unit, want string }{
		{"kubepods.slice", "kubepods.slice"},
		{"kubepods-burstable-pod1_2.slice", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice"},
		{"-.slice", ""},
		{"foo.scope", ""},
	} {
		if got := SlicePath(tt.unit); got != tt.want {
			t.Errorf("SlicePath(%q) = %q, want %q", tt.unit, got, tt.want)
		}
	}
}

// goSystemd connects go-systemd's client to the private bus, as the systemd cgroup driver's
// tests do.
func goSystemd(t *testing.T, addr string) *sddbus.Conn {
	t.Helper()
	c, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return Connect(addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func wait(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no JobRemoved for the job")
		return ""
	}
}

// The fake driven by go-systemd's own client: the job results it waits for, the slice
// directories, the recorded properties and systemd's errors.
func TestSystemdTransientSlices(t *testing.T) {
	tests := []struct {
		name string
		tree func(t *testing.T) string
		// dirs that must exist while the slice runs (relative to the root)
		want, absent []string
	}{
		{"v2", func(t *testing.T) string {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return root
		}, []string{"kubepods.slice/kubepods-burstable.slice"}, nil},
		{"v1", func(t *testing.T) string {
			root := t.TempDir()
			for _, h := range []string{"cpu", "memory", "cpuset"} {
				if err := os.Mkdir(filepath.Join(root, h), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			return root
		}, []string{"cpu/kubepods.slice/kubepods-burstable.slice", "memory/kubepods.slice/kubepods-burstable.slice"}, []string{"cpuset/kubepods.slice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bus := NewBus(t)
			root := tt.tree(t)
			sd, err := StartSystemd(bus.Addr, SystemdOptions{CgroupRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sd.Close() })
			c := goSystemd(t, bus.Addr)
			ctx := context.Background()
			const unit = "kubepods-burstable.slice"

			ch := make(chan string, 1)
			props := []sddbus.Property{sddbus.PropDescription("burstable"), {Name: "CPUShares", Value: dbus.MakeVariant(uint64(1024))}}
			if _, err := c.StartTransientUnitContext(ctx, unit, "replace", props, ch); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, ch); r != "done" {
				t.Fatalf("job result %q, want done", r)
			}
			for _, d := range tt.want {
				if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
					t.Errorf("%s not created: %v", d, err)
				}
			}
			for _, d := range tt.absent {
				if _, err := os.Stat(filepath.Join(root, d)); err == nil {
					t.Errorf("%s created; systemd does not manage it", d)
				}
			}

			_, err = c.StartTransientUnitContext(ctx, unit, "replace", props, make(chan string, 1))
			var derr dbus.Error
			if !errors.As(err, &derr) || derr.Name != ErrUnitExists {
				t.Fatalf("second start = %v, want %s", err, ErrUnitExists)
			}
			if err := c.SetUnitPropertiesContext(ctx, unit, true, sddbus.Property{Name: "CPUShares", Value: dbus.MakeVariant(uint64(2))}); err != nil {
				t.Fatal(err)
			}
			u, ok := sd.Unit(unit)
			if !ok || !u.Active || u.Props["CPUShares"].Value() != uint64(2) || u.Props["Description"].Value() != "burstable" {
				t.Fatalf("unit = %+v, %v; want active with CPUShares 2 and the description", u, ok)
			}

			sd.FailNextJob(unit, "failed")
			ch = make(chan string, 1)
			if _, err := c.StopUnitContext(ctx, unit, "replace", ch); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, ch); r != "failed" {
				t.Fatalf("stop job result %q, want failed", r)
			}
			if _, ok := sd.Unit(unit); !ok {
				t.Fatal("a failed stop removed the unit")
			}
			ch = make(chan string, 1)
			if _, err := c.StopUnitContext(ctx, unit, "replace", ch); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, ch); r != "done" {
				t.Fatalf("stop job result %q, want done", r)
			}
			if _, err := os.Stat(filepath.Join(root, tt.want[0])); !os.IsNotExist(err) {
				t.Errorf("%s still there after StopUnit: %v", tt.want[0], err)
			}
			_, err = c.StopUnitContext(ctx, unit, "replace", make(chan string, 1))
			if !errors.As(err, &derr) || derr.Name != ErrNoSuchUnit {
				t.Fatalf("stopping a stopped unit = %v, want %s", err, ErrNoSuchUnit)
			}
			v, err := c.GetManagerProperty("Version")
			if err != nil || v != `"252-fake"` {
				t.Errorf("Version = %s, %v", v, err)
			}
			if st, err := c.SystemStateContext(ctx); err != nil || st.Value.Value() != "running" {
				t.Errorf("SystemState = %v, %v", st, err)
			}
			var methods []string
			for _, call := range sd.UnitCalls() {
				methods = append(methods, call.Method+":"+call.Err)
			}
			want := []string{"StartTransientUnit:", "StartTransientUnit:" + ErrUnitExists, "SetUnitProperties:", "StopUnit:", "StopUnit:", "StopUnit:" + ErrNoSuchUnit}
			if len(methods) != len(want) {
				t.Fatalf("calls = %v, want %v", methods, want)
			}
			for i := range want {
				if methods[i] != want[i] {
					t.Errorf("call %d = %s, want %s", i, methods[i], want[i])
				}
			}
		})
	}
}
