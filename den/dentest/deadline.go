package dentest

import (
	"time"

	"github.com/den-project/den/den/internal/testdeadline"
)

// Deadline is when a test's waits give up: the test binary's -timeout
// less a margin (package testdeadline says why). Tests wait for what they
// check and bound the wait only by this, never by a duration tuned to how
// fast the server is today.
func Deadline() time.Time { return testdeadline.Deadline() }

// GiveUp returns a channel that fires at Deadline: the bound of a
// select that waits for a signal from the code.
func GiveUp() <-chan time.Time { return testdeadline.GiveUp() }

// Until calls cond every interval until it returns true, and reports
// whether it did before Deadline (testdeadline.Until): for a test that
// says more than Eventually does when it gives up.
func Until(interval time.Duration, cond func() bool) bool {
	return testdeadline.Until(interval, cond)
}

// UntilBy is Until with an earlier end, by (testdeadline.UntilBy).
func UntilBy(by time.Time, interval time.Duration, cond func() bool) bool {
	return testdeadline.UntilBy(by, interval, cond)
}
