package redlock

import (
	"fmt"
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

// writeBack is a variant (see fakeNode.variant) that runs the fence
// write-back's script with the replacements (old, new, …) made: what
// names it, for mustReplace.
func writeBack(what string, replacements ...string) func(*wire.Op) string {
	src := mustReplace(what, (&wire.Op{Kind: wire.OpFenceWrite}).Source(), replacements...)
	return func(o *wire.Op) string {
		if o.Kind == wire.OpFenceWrite {
			return src
		}
		return ""
	}
}

// lenientWriteBack is the fence write-back as it was before 2026-11-23,
// acknowledged whatever token holds the lock keys. The canary that shows
// why it must not be so runs it.
var lenientWriteBack = writeBack("lenientWriteBack",
	"if c >= t and not ours then return 0 end", "if c > t then return 0 end",
	"elseif v ~= ARGV[2] and string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '\\0' then\n\t\treturn -1\n", "",
)

// mustReplace returns src with each replacement (old, new, …) made once;
// it panics where old is not in src, so that a changed script cannot leave
// a variant (what) that changes nothing.
func mustReplace(what, src string, replacements ...string) string {
	for i := 0; i < len(replacements); i += 2 {
		if !strings.Contains(src, replacements[i]) {
			panic(fmt.Sprintf("%s: %q is not in the script", what, replacements[i]))
		}
		src = strings.Replace(src, replacements[i], replacements[i+1], 1)
	}
	return src
}
