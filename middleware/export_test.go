package middleware

// The guard's refusals, for the tests that check what they carry.
type (
	InProgressError    = inProgressError
	MismatchError      = mismatchError
	NotReplayableError = notReplayableError
)
