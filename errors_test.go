package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuorumErrorMessage(t *testing.T) {
	fakes := newFakeNodes(1)
	fakes[0].set("redlock:{job}", "other", time.Minute)
	c := newTestClient(t, fakes)
	_, err := c.TryLock(t.Context(), "job")
	require.EqualError(t, err, `redlock: lock "job": not obtained: 0 of 1 nodes agreed, 1 needed; fake0: redlock: held by another token`)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.TryLock(ctx, "job")
	require.EqualError(t, err, `redlock: lock "job": not obtained: no node asked: context canceled`)
}

func TestQuorumErrorUnwrap(t *testing.T) {
	e := &QuorumError{err: ErrTakenOver}
	require.ErrorIs(t, e, ErrTakenOver)
	require.NotErrorIs(t, e, ErrUnusable)
	e = &QuorumError{err: ErrNotObtained, unusable: true, cause: context.DeadlineExceeded}
	require.ErrorIs(t, e, ErrNotObtained)
	require.ErrorIs(t, e, ErrUnusable)
	require.ErrorIs(t, e, context.DeadlineExceeded)
	var qe *QuorumError
	require.True(t, errors.As(error(e), &qe))
}
