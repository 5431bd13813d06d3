//go:build !race

package sandbox

// raceEnabled: this test binary runs with the race detector, whose
// runtime allocates far more than den's does.
const raceEnabled = false
