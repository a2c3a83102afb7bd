package logrotate

import (
	"reflect"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 5, 14, 3, 9, 0, time.Local)
	const stamp = "0.log.20261205-140309"
	pol := Policy{MaxSize: 100, MaxFiles: 4}
	tests := []struct {
		name string
		logs Logs
		pol  Policy
		want Plan
	}{
		{name: "below the limit: nothing, leftovers included",
			logs: Logs{Live: "0.log", Size: 99, Rotated: []string{"0.log.20261205-140000.tmp"}}, pol: pol},
		{name: "at the limit: rotate", logs: Logs{Live: "0.log", Size: 100}, pol: pol,
			want: Plan{RotateTo: stamp}},
		{name: "older rotated files are compressed, the newest is not",
			logs: Logs{Live: "0.log", Size: 500, Rotated: []string{"0.log.20261205-140300", "0.log.20261205-140100.gz"}}, pol: pol,
			want: Plan{Compress: []string{"0.log.20261205-140300"}, RotateTo: stamp}},
		{name: "excess removed oldest first so maxFiles remain with the live one",
			logs: Logs{Live: "0.log", Size: 500, Rotated: []string{
				"0.log.20261205-140300", "0.log.20261205-140100.gz", "0.log.20261205-140200.gz", "0.log.20261205-140000.gz",
			}}, pol: pol,
			want: Plan{
				Remove:   []string{"0.log.20261205-140000.gz", "0.log.20261205-140100.gz"},
				Compress: []string{"0.log.20261205-140300"},
				RotateTo: stamp,
			}},
		{name: "maxFiles 2 keeps no older rotated file",
			logs: Logs{Live: "3.log", Size: 500, Rotated: []string{"3.log.20261205-140300", "3.log.20261205-140200.gz"}},
			pol:  Policy{MaxSize: 1, MaxFiles: 2},
			want: Plan{Remove: []string{"3.log.20261205-140200.gz", "3.log.20261205-140300"}, RotateTo: "3.log.20261205-140309"}},
		{name: "interrupted compressions: the .tmp and a rotated file whose .gz exists are removed first",
			logs: Logs{Live: "0.log", Size: 500, Rotated: []string{
				"0.log.20261205-140300.tmp", "0.log.20261205-140300", "0.log.20261205-140200", "0.log.20261205-140200.gz",
			}}, pol: pol,
			want: Plan{
				Remove:   []string{"0.log.20261205-140200", "0.log.20261205-140300.tmp"},
				Compress: []string{"0.log.20261205-140300"},
				RotateTo: stamp,
			}},
		{name: "the name this second is taken: wait for the next round",
			logs: Logs{Live: "0.log", Size: 500, Rotated: []string{stamp}}, pol: pol},
		{name: "the name this second is taken, gzipped",
			logs: Logs{Live: "0.log", Size: 500, Rotated: []string{stamp + ".gz", "0.log.20261205-140000.tmp"}}, pol: pol},
		{name: "negative max size: rotation off", logs: Logs{Live: "0.log", Size: 1 << 40}, pol: Policy{MaxSize: -1, MaxFiles: 5}},
		{name: "zero max size rotates every round, as upstream", logs: Logs{Live: "0.log"}, pol: Policy{MaxSize: 0, MaxFiles: 5},
			want: Plan{RotateTo: stamp}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]string(nil), tc.logs.Rotated...)
			got := Decide(tc.logs, tc.pol, now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide = %+v\nwant     %+v", got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.logs.Rotated) {
				t.Errorf("Decide reordered its input: %v", tc.logs.Rotated)
			}
		})
	}
}
