//go:build redlock_mutants

package redlock

// mutantsBuilt: this build carries the simulator's mutants (see
// mutants.go), for go test -tags redlock_mutants only.
const mutantsBuilt = true
