package agent

import (
	"testing"

	"github.com/nodelet/nodelet/internal/leakcheck"
)

// Every goroutine nodelet starts must have returned once the tests end.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
