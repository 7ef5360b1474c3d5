package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// limit is one row of the README's Limits table: a call at the limit,
// which must not be refused as invalid, and one just past it, which must
// fail with ErrInvalidArgument saying says.
type limit struct {
	what, limit, says string
	at, past          func(c *Client) error
}

func long(n int) string { return strings.Repeat("k", n) }

func tryLock(key string, opts ...Option) func(*Client) error {
	return func(c *Client) error {
		l, err := c.TryLock(context.Background(), key, opts...)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		return err
	}
}

func made[T any](_ T, err error) error { return err }

func withClient(n int, opts ...Option) func(*Client) error {
	return func(*Client) error {
		nodes := make([]node, n)
		for i, f := range newFakeNodes(n) {
			nodes[i] = f
		}
		c, err := newClient(nodes, opts)
		if err == nil {
			err = c.Close(context.Background())
		}
		return err
	}
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprint("k", i)
	}
	return ks
}

func campaign(value string) func(*Client) error {
	return func(c *Client) error {
		e, err := c.Election("e")
		if err != nil {
			return err
		}
		ld, err := e.Campaign(context.Background(), value)
		if err == nil {
			err = ld.Resign(context.Background())
		}
		return err
	}
}

var limits = []limit{
	{"lock key (`Lock`, `TryLock`, `Do`, `Inspect`, each key of `MultiLock`)", "1 to 1,024 bytes", "key is 1025 bytes, more than 1024",
		tryLock(long(1024)), tryLock(long(1025))},
	{"election name", "1 to 1,015 bytes (its key is `election:NAME`)", "key is 1025 bytes, more than 1024",
		func(c *Client) error { return made(c.Election(long(1015))) }, func(c *Client) error { return made(c.Election(long(1016))) }},
	{"read-write lock name", "1 to 1,021 bytes (its key is `rw:NAME`)", "key is 1025 bytes, more than 1024",
		func(c *Client) error { return made(c.RWMutex(long(1021))) }, func(c *Client) error { return made(c.RWMutex(long(1022))) }},
	{"semaphore name", "1 to 1,024 − 5 − the digits of P−1 bytes (slot keys are `sem:NAME:i`): 1,018 for 8 permits", "key is 1025 bytes, more than 1024",
		func(c *Client) error { return made(c.Semaphore(long(1018), 8)) }, func(c *Client) error { return made(c.Semaphore(long(1019), 8)) }},
	{"`WithMetadata`", "4,096 bytes", "metadata is 4097 bytes, more than 4096",
		tryLock("k", WithMetadata(long(4096))), tryLock("k", WithMetadata(long(4097)))},
	{"`WithMetadata`'s first byte", "any but 0x02 (the mark of a key with waiters)", "metadata starts with the byte 0x02, which marks a lock key whose wait queue has had places",
		tryLock("k", WithMetadata("\x01host")), tryLock("k", WithMetadata("\x02host"))},
	{"an election's value (`Campaign`, `Lead`, `Proclaim`)", "4,075 bytes (it shares the metadata with the term)", "value is 4076 bytes, more than 4075",
		campaign(long(4075)), campaign(long(4076))},
	{"`WithToken`", "1 to 256 bytes, no NUL byte", "token is 257 bytes, more than 256",
		tryLock("k", WithToken(long(256))), tryLock("k", WithToken(long(257)))},
	{"keys of one `MultiLock`", "1 to 64, each once", "65 keys, more than 64",
		func(c *Client) error { return made(c.MultiLock(keys(64))) }, func(c *Client) error { return made(c.MultiLock(keys(65))) }},
	{"semaphore permits", "1 to 128", "semaphore permits 129 outside [1, 128]",
		func(c *Client) error { return made(c.Semaphore("s", 128)) }, func(c *Client) error { return made(c.Semaphore("s", 129)) }},
	{"nodes", "3, 5, 7, … up to 63 (1 to 63 with `WithAnyNodeCount`)", "65 clients: at most 63",
		withClient(63), withClient(65)},
	{"TTL (`WithTTL`, `Extend`), cooldown (`UnlockAfter`)", "1 ms to 24 h, and positive validity after drift", "TTL 25h0m0s is more than 24h0m0s",
		tryLock("k", WithTTL(24*time.Hour)), tryLock("k", WithTTL(25*time.Hour))},
	{"`WithMaxHold`", "1 ms to 30 days", "max hold 721h0m0s outside [1ms, 720h0m0s]",
		tryLock("k", WithMaxHold(720*time.Hour)), tryLock("k", WithMaxHold(721*time.Hour))},
	{"`WithWaiterLease`", "10 ms to 1 h", "waiter lease 2h0m0s outside [10ms, 1h0m0s]",
		withClient(3, WithWaiterLease(time.Hour)), withClient(3, WithWaiterLease(2*time.Hour))},
	{"`WithKeyPrefix`", "up to 1,024 bytes, no braces", `key prefix "{x}" contains braces or is too long`,
		withClient(3, WithKeyPrefix(long(1024))), withClient(3, WithKeyPrefix("{x}"))},
	{"`WithDriftFactor`", "0 to just under 1", "drift factor 1 outside [0, 1)",
		withClient(3, WithDriftFactor(0.99)), withClient(3, WithDriftFactor(1))},
	{"`WithNodeTimeout`", "more than 0", "node timeout 0s is not positive",
		withClient(3, WithNodeTimeout(time.Nanosecond)), withClient(3, WithNodeTimeout(0))},
	{"`WithRestartGuard`", "0 (off) to 24 h", "restart guard period 25h0m0s outside [0, 24h0m0s]",
		withClient(3, WithRestartGuard(24*time.Hour)), withClient(3, WithRestartGuard(25*time.Hour))},
}

// TestReadmeLimits: the README's Limits table says what the code does.
// Each row is there as written here, a call at the limit is not refused as
// invalid, and one past it fails at once with ErrInvalidArgument and the
// error the table gives.
func TestReadmeLimits(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "\n### Limits\n")
	require.True(t, ok, "README.md has no Limits section")
	rows := map[string][2]string{}
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) == 3 {
			rows[cells[0]] = [2]string{cells[1], strings.Trim(cells[2], "`")}
		}
		if strings.HasPrefix(line, "#") {
			break
		}
	}
	for _, l := range limits {
		t.Run(l.what, func(t *testing.T) {
			row, ok := rows[l.what]
			require.True(t, ok, "README's Limits table has no row %q", l.what)
			require.Equal(t, [2]string{l.limit, l.says}, row, "README's row %q", l.what)
			synctest.Test(t, func(t *testing.T) {
				c := newTestClient(t, newFakeNodes(3))
				if err := l.at(c); errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("at the limit: %v", err)
				}
				err := l.past(c)
				require.ErrorIs(t, err, ErrInvalidArgument, "past the limit")
				require.ErrorContains(t, err, l.says)
			})
		})
	}
	require.Len(t, rows, len(limits)+2, "the README's table has rows this test does not check") // +2: the header and its rule
}
