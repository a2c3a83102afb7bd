package safepath

import (
	"os"
	"testing"
)

// FuzzResolveSubPath resolves random sub paths (Open, then MkdirAll) in a
// tree full of links out of the root. Invariant: each call fails or yields a
// descriptor whose real path is inside the root, and nothing is ever created
// outside.
func FuzzResolveSubPath(f *testing.F) {
	for _, seed := range []string{
		"", ".", "d/f", "v1..2", "in/f", "fl", "key", "..data/key",
		"escape", "escape/a/b", "up/secret", "abs", "d/up", "in/up/new", "outf",
		"dang/x", "loop", "..", "a/../..", "/etc", "d//./f", "new/dir/", "d/f/x",
	} {
		f.Add(seed)
	}
	tr := newTree(f)
	f.Fuzz(func(t *testing.T, sub string) {
		for _, fn := range []func(string, string) (*os.File, error){Open, MkdirAll} {
			file, err := fn(tr.root, sub)
			if err != nil {
				continue
			}
			tr.assertInside(t, sub, file)
			file.Close()
		}
		tr.assertOutsideUntouched(t)
	})
}
