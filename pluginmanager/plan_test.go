package pluginmanager

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b := fileID{ino: 1}, fileID{ino: 2}
	for _, c := range []struct {
		name  string
		found map[string]fileID
		known map[string]sockState
		want  actions
	}{
		{name: "nothing", want: actions{}},
		{name: "new socket registers", found: map[string]fileID{"/r/a": a}, want: actions{register: []string{"/r/a"}}},
		{name: "registered socket stays", found: map[string]fileID{"/r/a": a},
			known: map[string]sockState{"/r/a": {id: a, settled: true, plugin: Plugin{Name: "d"}}}, want: actions{}},
		{name: "refused socket waits for a change", found: map[string]fileID{"/r/a": a},
			known: map[string]sockState{"/r/a": {id: a, settled: true}}, want: actions{}},
		{name: "removed socket drops", known: map[string]sockState{"/r/a": {id: a, settled: true, plugin: Plugin{Name: "d"}}},
			want: actions{drop: []string{"/r/a"}}},
		{name: "re-created socket drops and registers", found: map[string]fileID{"/r/a": b},
			known: map[string]sockState{"/r/a": {id: a, settled: true, plugin: Plugin{Name: "d"}}},
			want:  actions{drop: []string{"/r/a"}, register: []string{"/r/a"}}},
		{name: "registration server gone: drop and register again", found: map[string]fileID{"/r/a": a},
			known: map[string]sockState{"/r/a": {id: a, settled: true, plugin: Plugin{Name: "d"}, gone: true}},
			want:  actions{drop: []string{"/r/a"}, register: []string{"/r/a"}}},
		{name: "busy socket left alone even when removed", found: map[string]fileID{"/r/b": b},
			known: map[string]sockState{"/r/a": {id: a, busy: true}, "/r/b": {id: a, busy: true}}, want: actions{}},
		{name: "failed socket retried when due", found: map[string]fileID{"/r/a": a},
			known: map[string]sockState{"/r/a": {id: a, failures: 1, retryAt: now}}, want: actions{register: []string{"/r/a"}}},
		{name: "failed socket not retried before due", found: map[string]fileID{"/r/a": a},
			known: map[string]sockState{"/r/a": {id: a, failures: 1, retryAt: now.Add(time.Millisecond)}}, want: actions{}},
		{name: "sorted", found: map[string]fileID{"/r/c": a, "/r/b": a}, known: map[string]sockState{"/r/z": {id: a}, "/r/y": {id: a}},
			want: actions{drop: []string{"/r/y", "/r/z"}, register: []string{"/r/b", "/r/c"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := plan(c.found, c.known, now); !reflect.DeepEqual(got, c.want) {
				t.Errorf("plan = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 8: 64 * time.Second, 9: 122 * time.Second, 100: 122 * time.Second} {
		if got := retryDelay(n); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestFindSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	listen := func(path string) {
		l := listenUnix(t, path)
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	listen(filepath.Join(dir, "a.sock"))
	listen(filepath.Join(dir, "sub", "b.sock"))
	listen(filepath.Join(dir, ".hidden.sock"))
	listen(filepath.Join(dir, ".dir", "c.sock"))
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a.sock"), filepath.Join(dir, "link.sock")); err != nil {
		t.Fatal(err)
	}
	found, err := findSockets(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p := range found {
		got = append(got, strings.TrimPrefix(p, dir+"/"))
	}
	sort.Strings(got)
	if want := []string{"a.sock", "sub/b.sock"}; !reflect.DeepEqual(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}

	// A socket re-created at the same path is another file (made before
	// the old one goes, so its inode number cannot be the old one's).
	before := found[filepath.Join(dir, "a.sock")]
	listen(filepath.Join(dir, "a2.sock"))
	if err := os.Rename(filepath.Join(dir, "a2.sock"), filepath.Join(dir, "a.sock")); err != nil {
		t.Fatal(err)
	}
	found, _ = findSockets(dir)
	if after := found[filepath.Join(dir, "a.sock")]; after == before {
		t.Errorf("re-created socket has the same identity %+v", after)
	}

	if _, err := findSockets(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory listed without error")
	}
}

func TestNoHandler(t *testing.T) {
	const sock = "/var/lib/kubelet/plugins_registry/d-reg.sock"
	for _, c := range []struct {
		pluginType string
		handled    []string
		want       string
	}{
		{pluginType: "DRAPlugin", handled: []string{"CSIPlugin"},
			want: "RegisterPlugin error -- no handler registered for plugin type: DRAPlugin at socket " + sock + " (DRAPlugin plugins are not supported by nodelet, only CSIPlugin)"},
		{pluginType: "DevicePlugin", handled: []string{"CSIPlugin", "DRAPlugin"},
			want: "RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket " + sock + " (DevicePlugin plugins are not supported by nodelet, only CSIPlugin, DRAPlugin)"},
	} {
		if got := noHandler(c.pluginType, sock, c.handled).Error(); got != c.want {
			t.Errorf("noHandler(%s) = %q, want %q", c.pluginType, got, c.want)
		}
	}
}
