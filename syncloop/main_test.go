package syncloop

import (
	"testing"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

// Every worker and operation goroutine a test starts must have returned when
// the tests end.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
