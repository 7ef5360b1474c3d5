//go:build !race

package redlock

const raceEnabled = false
