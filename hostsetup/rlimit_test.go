package hostsetup

import (
	"context"
	"errors"
	"slices"
	"testing"
)

type fakeNoFile struct {
	set []uint64
	err error
}

func (f *fakeNoFile) SetNoFile(n uint64) error {
	f.set = append(f.set, n)
	return f.err
}

// maxOpenFiles becomes RLIMIT_NOFILE at start; a failure is logged, not fatal,
// as upstream.
func TestMaxOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int64
		err  error
		want []uint64
	}{
		{name: "upstream default", max: 1000000, want: []uint64{1000000}},
		{name: "set", max: 65536, want: []uint64{65536}},
		{name: "refused by the kernel: logged, start goes on", max: 1 << 40, err: errors.New("operation not permitted"), want: []uint64{1 << 40}},
		{name: "zero never sets a limit of 0", max: 0, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNoFile{err: tc.err}
			ApplyMaxOpenFiles(context.Background(), tc.max, f)
			if !slices.Equal(f.set, tc.want) {
				t.Fatalf("set %v, want %v", f.set, tc.want)
			}
		})
	}
}
