package csi

import (
	"reflect"
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
			known: map[string]sockState{"/r/a": {id: a, settled: true, driver: "d"}}, want: actions{}},
		{name: "refused socket waits for a change", found: map[string]fileID{"/r/a": a},
			known: map[string]sockState{"/r/a": {id: a, settled: true}}, want: actions{}},
		{name: "removed socket drops", known: map[string]sockState{"/r/a": {id: a, settled: true, driver: "d"}},
			want: actions{drop: []string{"/r/a"}}},
		{name: "re-created socket drops and registers", found: map[string]fileID{"/r/a": b},
			known: map[string]sockState{"/r/a": {id: a, settled: true, driver: "d"}},
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
