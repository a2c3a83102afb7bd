package agent

import (
	"testing"

	occgroups "github.com/opencontainers/cgroups"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

// Every goroutine nodelet starts must have returned once the tests end. The cgroup
// manager writes through opencontainers/cgroups, which outside /sys/fs/cgroup only
// opens files on a cgroup filesystem unless its TestMode is on (temp-dir trees).
func TestMain(m *testing.M) {
	occgroups.TestMode = true
	leakcheck.VerifyTestMain(m)
}
