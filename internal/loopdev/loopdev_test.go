package loopdev

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func requireLoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
}

func TestAttachFindDetach(t *testing.T) {
	requireLoop(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, err := Attach(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Detach(dev) })

	found, err := Find(img)
	if err != nil || len(found) != 1 || found[0] != dev {
		t.Fatalf("Find(%s) = %v, %v; want [%s]", img, found, err, dev)
	}
	again, err := EnsureAttached(img)
	if err != nil || again != dev {
		t.Fatalf("EnsureAttached = %q, %v; want the attached %s", again, err, dev)
	}
	// What is written through the device lands in the file.
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello loop"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := DetachAll(img); err != nil {
		t.Fatal(err)
	}
	if found, err := Find(img); err != nil || len(found) != 0 {
		t.Fatalf("after DetachAll, Find = %v, %v; want none", found, err)
	}
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data[4096:4096+10], []byte("hello loop")) {
		t.Fatalf("the file holds %q at 4096, want what was written through the device", data[4096:4096+10])
	}
	// Detaching again is no error.
	if err := Detach(dev); err != nil {
		t.Fatalf("second Detach: %v", err)
	}
}

func TestFindNone(t *testing.T) {
	found, err := Find(filepath.Join(t.TempDir(), "nothing"))
	if err != nil || len(found) != 0 {
		t.Fatalf("Find = %v, %v; want none", found, err)
	}
}
