package istioadopt

import (
	"os"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/podtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	podtest.Stop()
	os.Exit(code)
}
