package devicemanager

import (
	"testing"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
