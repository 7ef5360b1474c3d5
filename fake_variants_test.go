package redlock

import (
	"strings"

	"github.com/redlock-go/redlock/internal/wire"
)

// Script variants for fake nodes (see fakeNode.variant): the scripts of
// an older Client, or a rule taken out, for the tests and canaries that
// need a node to run them.

// oneKeyGrants is a variant (see fakeNode.variant): a release grants a
// set's place the key it releases and none of the set's others, as a
// Client's before 2026-11-29 did (wire's grantRest), for tests of what a
// set does when a release leaves it a free key to take by its attempt.
func oneKeyGrants(o *wire.Op) string {
	if o.Kind != wire.OpRelease {
		return ""
	}
	src := o.Source()
	if !strings.Contains(src, grantRestCall) {
		panic("oneKeyGrants: the release script calls no grantRest")
	}
	return strings.ReplaceAll(src, grantRestCall, "if false then grantRest(")
}

const grantRestCall = "if isSet(h) then grantRest("

// lenientWriteBack is a variant (see fakeNode.variant): the fence
// write-back as it was before 2026-11-23, acknowledged whatever token holds
// the lock keys. The canary that shows why it must not be so runs it.
func lenientWriteBack(o *wire.Op) string {
	if o.Kind == wire.OpFenceWrite {
		return lenientWriteBackSrc
	}
	return ""
}

var lenientWriteBackSrc = strings.NewReplacer(
	"ours = false", "ours = true",
	"elseif v ~= ARGV[2] and string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '\\0' then\n\t\treturn -1\n", "",
).Replace((&wire.Op{Kind: wire.OpFenceWrite}).Source())
