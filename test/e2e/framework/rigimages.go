package framework

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// rigImages maps each image every test relies on to the archive test/rig/up.sh imported it
// from ($RIG_DIR/images).
func (e *RigEnv) rigImages() map[string]string {
	return map[string]string{
		e.BusyboxImage: filepath.Join(e.RigDir, "images", "busybox.tar"),
		e.PauseImage:   filepath.Join(e.RigDir, "images", "pause.tar"),
	}
}

// keepRigImages checks that the rig's own images are in the runtime, before the test and
// after it. A test whose nodelet removed one (image GC, eviction's reclaim) fails by name
// here, and the image is imported again, so one such test does not turn every later test
// into a two-minute ErrImageNeverPull timeout.
func keepRigImages(t testing.TB, env *RigEnv, c *CRIClient) {
	t.Helper()
	restore := func(when string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tags, err := c.ImageTags(ctx)
		if err != nil {
			t.Errorf("listing the runtime's images %s: %v", when, err)
			return
		}
		for img, tar := range env.rigImages() {
			if img == "" || slices.Contains(tags, img) {
				continue
			}
			t.Errorf("the rig's image %s is not in the runtime %s; importing it again from %s", img, when, tar)
			if out, err := exec.CommandContext(ctx, env.Ctr, "images", "import", tar).CombinedOutput(); err != nil {
				t.Errorf("importing %s: %v\n%s", tar, err, out)
			}
		}
	}
	restore("before the test (an earlier test removed it)")
	t.Cleanup(func() { restore(fmt.Sprintf("after %s", t.Name())) })
}
