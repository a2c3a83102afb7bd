package node

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for path, content := range files {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadMachineInfoFromTree(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    MachineInfo // EphemeralStorage checked separately
		wantErr bool
	}{
		{
			name: "full host",
			files: map[string]string{
				"/proc/meminfo":                  "MemTotal:       24576000 kB\nMemFree: 1 kB\nSwapTotal:       1024 kB\n",
				"/sys/devices/system/cpu/online": "0-3,6\n",
				"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "4\n",
				"/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
				"/etc/machine-id":                 "abc123\n",
				"/sys/class/dmi/id/product_uuid":  "UUID-1\n",
				"/proc/sys/kernel/random/boot_id": "boot-1\n",
				"/proc/sys/kernel/osrelease":      "6.18.44\n",
				"/etc/os-release":                 "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
			},
			want: MachineInfo{
				NumCores: 5, MemoryCapacity: 24576000 * 1024, SwapCapacity: 1024 * 1024,
				HugePages: []HugePage{{SizeKiB: 1048576, NumPages: 0}, {SizeKiB: 2048, NumPages: 4}},
				MachineID: "abc123", SystemUUID: "UUID-1", BootID: "boot-1",
				KernelVersion: "6.18.44", OSImage: "Debian GNU/Linux 12 (bookworm)",
			},
		},
		{
			name: "fallbacks: dbus machine-id, device-tree uuid with NUL, no os-release",
			files: map[string]string{
				"/proc/meminfo":                  "MemTotal: 1000 kB\n",
				"/sys/devices/system/cpu/online": "0\n",
				"/var/lib/dbus/machine-id":       "dbus-id\n",
				"/proc/device-tree/system-id":    "dt-uuid\x00",
				"/proc/sys/kernel/osrelease":     "5.10\n",
			},
			want: MachineInfo{
				NumCores: 1, MemoryCapacity: 1000 * 1024,
				MachineID: "dbus-id", SystemUUID: "dt-uuid", KernelVersion: "5.10", OSImage: "Linux",
			},
		},
		{
			name:    "no MemTotal is an error",
			files:   map[string]string{"/proc/meminfo": "MemFree: 1 kB\n"},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := t.TempDir()
			writeTree(t, host, tc.files)
			// A root dir that does not exist yet is measured at its parent.
			got, err := readMachineInfo(host, filepath.Join(t.TempDir(), "not", "yet"))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.EphemeralStorage == 0 {
				t.Errorf("EphemeralStorage = 0, want the temp filesystem's size")
			}
			got.EphemeralStorage = 0
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestReadMachineInfoHost(t *testing.T) {
	mi, err := ReadMachineInfo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if mi.NumCores < 1 || mi.MemoryCapacity == 0 || mi.EphemeralStorage == 0 || mi.KernelVersion == "" || mi.OSImage == "" {
		t.Errorf("implausible machine info from this host: %+v", mi)
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "0", want: []int{0}},
		{in: "0-1", want: []int{0, 1}},
		{in: "0-2,5,7-8", want: []int{0, 1, 2, 5, 7, 8}},
		{in: "", want: nil},
		{in: "3-1", wantErr: true},
		{in: "a", wantErr: true},
		{in: "1-x", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseCPUList(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseCPUList(%q) err = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
