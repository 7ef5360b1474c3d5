//go:build race

package redlock

// raceEnabled: the tests run under the race detector, about ten times
// slower; the simulator runs fewer seeds.
const raceEnabled = true
