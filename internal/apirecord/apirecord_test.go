package apirecord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const fixture = `package lib

import "context"

// Client is exported; client is not.
type Client struct {
	Addr    string
	timeout int
	*Embedded
}

type Embedded struct{}

type client struct{}

type Kind int

const (
	KindA Kind = iota
	KindB
	kindC
)

var ErrX = errNew("x")

type Locker interface {
	Lock(ctx context.Context) error
	unlock()
}

type Option = func(*Client)

func New(addrs []string, opts ...Option) (*Client, error) { return nil, nil }

func (c *Client) Do(ctx context.Context, key string, n, m int) error { return nil }

func (c *Client) do() {}

func (client) Do() {}

func errNew(s string) error { return nil }
`

func writeFixture(t *testing.T, src string) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib_test.go"), []byte("package lib\n\nfunc TestOnly() {}\n"), 0o644))
	return dir
}

func TestLines(t *testing.T) {
	lines, err := Lines(writeFixture(t, fixture))
	require.NoError(t, err)
	require.Equal(t, []string{
		"pkg lib, const KindA Kind",
		"pkg lib, const KindB Kind",
		"pkg lib, func New([]string, ...Option) (*Client, error)",
		"pkg lib, method (*Client) Do(context.Context, string, int, int) error",
		"pkg lib, type Client struct",
		"pkg lib, type Client struct, Addr string",
		"pkg lib, type Client struct, embedded *Embedded",
		"pkg lib, type Embedded struct",
		"pkg lib, type Kind int",
		"pkg lib, type Locker interface",
		"pkg lib, type Locker interface, Lock(context.Context) error",
		"pkg lib, type Option = func(*Client)",
		"pkg lib, var ErrX",
	}, lines)
}

// TestCheckFindsAChange: a record written from the package matches it;
// a deliberate change of the API (a function added, a method's signature
// changed) then shows up on both sides.
func TestCheckFindsAChange(t *testing.T) {
	dir := writeFixture(t, fixture)
	record := filepath.Join(t.TempDir(), "lib.txt")
	require.NoError(t, Write(dir, record))
	added, removed, err := Check(dir, record)
	require.NoError(t, err)
	require.Empty(t, added)
	require.Empty(t, removed)

	const before = "func (c *Client) Do(ctx context.Context, key string, n, m int) error"
	require.Contains(t, fixture, before)
	changed := strings.Replace(fixture, before, "func (c *Client) Do(ctx context.Context, key string) error", 1) + "\nfunc Added() {}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib.go"), []byte(changed), 0o644))
	added, removed, err = Check(dir, record)
	require.NoError(t, err)
	require.Equal(t, []string{"pkg lib, func Added()", "pkg lib, method (*Client) Do(context.Context, string) error"}, added)
	require.Equal(t, []string{"pkg lib, method (*Client) Do(context.Context, string, int, int) error"}, removed)
}
