package redlock

import (
	"flag"
	"testing"

	"github.com/redlock-go/redlock/internal/apirecord"
)

var updateAPI = flag.Bool("update-api", false, "rewrite api/redlock.txt from the package's exported API")

// TestAPI fails when the package's exported API differs from the record in
// api/redlock.txt: an API change is made on purpose, by regenerating the
// record (go test -run TestAPI -update-api .) and saying why in
// CHANGELOG.md, so that both show up in review.
func TestAPI(t *testing.T) { apirecord.Test(t, ".", "api/redlock.txt", *updateAPI) }
