package nodeio

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

// TestRunID reads the run_id of INFO server replies, and finds none where
// there is none.
func TestRunID(t *testing.T) {
	for _, tc := range []struct {
		name, info, want string
		ok               bool
	}{
		{"redis 7", "# Server\r\nredis_version:7.0.15\r\nrun_id:3f1c0a9e2b\r\ntcp_port:6379\r\n", "3f1c0a9e2b", true},
		{"last line", "# Server\r\nrun_id:ab12", "ab12", true},
		{"absent", "# Clients\r\nconnected_clients:1\r\n", "", false},
		{"empty", "run_id:\r\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := runID(tc.info)
			assert.Equal(t, tc.want, id)
			assert.Equal(t, tc.ok, ok)
		})
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
