//go:build !redlock_mutants

package redlock

// mutantsBuilt: this build carries no mutants (see mutants.go).
const mutantsBuilt = false
