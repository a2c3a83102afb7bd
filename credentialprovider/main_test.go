package credentialprovider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

// binDir holds the test plugin (./testprovider) under the names the tests
// configure, built once for the package's tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "credentialprovider-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	bin := filepath.Join(dir, "test-provider")
	if out, err := exec.Command("go", "build", "-o", bin, "./testprovider").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test credential provider: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	for _, name := range []string{"other-provider", "third-provider"} {
		if err := os.Link(bin, filepath.Join(dir, name)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	leakcheck.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}
