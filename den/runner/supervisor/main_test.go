package supervisor_test

import (
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
)

func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{
		// A child that is still this very binary, without a sandbox spec:
		// what a program looks like between Go's fork and its exec
		// (memory_internal_test.go). It only lives until the test kills
		// it: a program's life, not a wait (the minute bounds it, should
		// the test not).
		"hold": func() int { time.Sleep(time.Minute); return 0 },
	})
}
