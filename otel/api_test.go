package redlockotel

import (
	"flag"
	"testing"

	"github.com/redlock-go/redlock/internal/apirecord"
)

var updateAPI = flag.Bool("update-api", false, "rewrite ../api/otel.txt from the package's exported API")

// TestAPI fails when the package's exported API differs from the record in
// ../api/otel.txt (see the root package's TestAPI).
func TestAPI(t *testing.T) { apirecord.Test(t, ".", "../api/otel.txt", *updateAPI) }
