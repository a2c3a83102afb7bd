package procfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	const data = "MemTotal:       24576000 kB\nMemFree: 100 kB\nSwapTotal:       1048572 kB\nHugePages_Total:       4\nbroken line\nWeird:  x kB\n"
	mi := ParseMeminfo([]byte(data))
	tests := []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"MemTotal", 24576000 * 1024, true},
		{"SwapTotal", 1048572 * 1024, true},
		{"HugePages_Total", 4, true}, // no unit: a count, not scaled
		{"Weird", 0, false},
		{"Missing", 0, false},
	}
	for _, tc := range tests {
		got, ok := mi[tc.key]
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s = %d, %v; want %d, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadMeminfo(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("MemTotal: 2 kB\nSwapTotal: 0 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("SwapTotal: 0 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mi, err := ReadMeminfo(good); err != nil || mi["MemTotal"] != 2048 || mi["SwapTotal"] != 0 {
		t.Errorf("ReadMeminfo(good) = %v, %v", mi, err)
	}
	if _, err := ReadMeminfo(bad); err == nil {
		t.Error("ReadMeminfo without MemTotal: no error")
	}
	if _, err := ReadMeminfo(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadMeminfo of a missing file: no error")
	}
}
