package volumes

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

var tsDirRE = regexp.MustCompile(`^\.\.2026_12_02_13_00_0\d\.\d+$`)

func readThrough(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("reading %s through the user-visible path: %v", name, err)
	}
	return string(b)
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func tsDirs(t *testing.T, dir string) []string {
	var out []string
	for _, n := range listDir(t, dir) {
		if tsDirRE.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}

func TestWritePayloadLayoutAndUpdate(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

	changed, err := writePayload(dir, map[string]fileProjection{
		"a":         {Data: []byte("one"), Mode: 0o644},
		"sub/b":     {Data: []byte("two"), Mode: 0o400},
		"gone-soon": {Data: []byte("x"), Mode: 0o644},
	}, 0, t0)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	ts := tsDirs(t, dir)
	if len(ts) != 1 {
		t.Fatalf("want one timestamped dir, have %v", listDir(t, dir))
	}
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err != nil || target != ts[0] {
		t.Fatalf("..data -> %q (%v), want %q", target, err, ts[0])
	}
	for _, n := range []string{"a", "sub", "gone-soon"} {
		target, err := os.Readlink(filepath.Join(dir, n))
		if err != nil || target != filepath.Join("..data", n) {
			t.Errorf("%s -> %q (%v), want ..data/%s", n, target, err, n)
		}
	}
	if got := readThrough(t, dir, "sub/b"); got != "two" {
		t.Errorf("sub/b = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub/b")); fi.Mode().Perm() != 0o400 {
		t.Errorf("sub/b mode %v, want 0400", fi.Mode().Perm())
	}

	// Same payload: nothing rewritten, same directory.
	changed, err = writePayload(dir, map[string]fileProjection{
		"a":         {Data: []byte("one"), Mode: 0o644},
		"sub/b":     {Data: []byte("two"), Mode: 0o400},
		"gone-soon": {Data: []byte("x"), Mode: 0o644},
	}, 0, t0.Add(time.Second))
	if err != nil || changed {
		t.Fatalf("identical write: changed=%v err=%v", changed, err)
	}
	if got := tsDirs(t, dir); len(got) != 1 || got[0] != ts[0] {
		t.Fatalf("identical write replaced the data dir: %v", got)
	}

	// A file opened before the update keeps reading the old content while
	// the path shows the new one.
	old, err := os.Open(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	changed, err = writePayload(dir, map[string]fileProjection{
		"a":     {Data: []byte("ONE"), Mode: 0o644},
		"sub/b": {Data: []byte("two"), Mode: 0o400},
		"new":   {Data: []byte("3"), Mode: 0o600},
	}, 0, t0.Add(2*time.Second))
	if err != nil || !changed {
		t.Fatalf("update: changed=%v err=%v", changed, err)
	}
	ts2 := tsDirs(t, dir)
	if len(ts2) != 1 || ts2[0] == ts[0] {
		t.Fatalf("after update want one new timestamped dir, have %v (old %s)", ts2, ts[0])
	}
	if target, _ := os.Readlink(filepath.Join(dir, "..data")); target != ts2[0] {
		t.Errorf("..data -> %q, want %q", target, ts2[0])
	}
	if got := readThrough(t, dir, "a"); got != "ONE" {
		t.Errorf("a = %q after update", got)
	}
	if got := readThrough(t, dir, "new"); got != "3" {
		t.Errorf("new = %q", got)
	}
	buf := make([]byte, 8)
	n, _ := old.Read(buf)
	if string(buf[:n]) != "one" {
		t.Errorf("open file saw %q, want the old content", buf[:n])
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone-soon")); !os.IsNotExist(err) {
		t.Errorf("removed key still visible: %v", err)
	}
	want := []string{"..data", ts2[0], "a", "new", "sub"}
	sort.Strings(want)
	if got := listDir(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("dir holds %v, want %v", got, want)
	}

	// Mode-only change is a change too.
	changed, err = writePayload(dir, map[string]fileProjection{
		"a":     {Data: []byte("ONE"), Mode: 0o600},
		"sub/b": {Data: []byte("two"), Mode: 0o400},
		"new":   {Data: []byte("3"), Mode: 0o600},
	}, 0, t0.Add(3*time.Second))
	if err != nil || !changed {
		t.Fatalf("mode change: changed=%v err=%v", changed, err)
	}
}

func TestWritePayloadEmptyAndInvalidPaths(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	if _, err := writePayload(dir, map[string]fileProjection{}, 0, now); err != nil {
		t.Fatalf("empty payload: %v", err)
	}
	if _, err := os.Readlink(filepath.Join(dir, "..data")); err != nil {
		t.Errorf("empty payload has no ..data: %v", err)
	}
	for _, p := range []string{"/abs", "../escape", "a/../../b", "..hidden", "a//b", ""} {
		if _, err := writePayload(dir, map[string]fileProjection{p: {Data: []byte("x"), Mode: 0o644}}, 0, now); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
}
