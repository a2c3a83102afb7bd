package prober

import (
	"testing"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

// Every probe worker a test starts must have returned when the tests end.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
