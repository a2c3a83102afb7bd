package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Bytes fails the test unless the file at path holds got; with update it
// writes got there first (creating the directory), so a test's -update flag
// refreshes the committed file and a plain run catches a stale one.
func Bytes(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what was written now:\n file: %s\n  now: %s", path, want, got)
	}
}

// Upstream fails the test unless got, what nodelet writes for the state file
// name, equals the file the kubelet's own code wrote (testdata/upstream/name),
// then checks (or with update writes) it as testdata/nodelet/name, the file the
// kubelet's code reads in test/rig/k8sbins/checkpointcompat.
func Upstream(t testing.TB, name string, got []byte, update bool) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("testdata", "upstream", name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("nodelet writes\n%s\nthe kubelet\n%s", got, want)
	}
	Bytes(t, filepath.Join("testdata", "nodelet", name), got, update)
}
