package worker_test

import (
	"testing"

	"github.com/den-project/den/den/dentest"
)

func TestMain(m *testing.M) {
	dentest.Main(m, nil)
}
