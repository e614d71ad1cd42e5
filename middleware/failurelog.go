package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// defaultFailureLogInterval is documented on WithFailureLogInterval.
const defaultFailureLogInterval = time.Minute

// maxFailureCauses bounds the causes a failureLog remembers; past it, it
// starts over (a cause is then logged at once again).
const maxFailureCauses = 64

// failureLog logs the guard's backend failures (see
// WithFailureLogInterval). A cause is the coded error's code and detail,
// never a key, so one outage is one line, and a second cause is not hidden
// behind the first.
type failureLog struct {
	logger *slog.Logger
	every  time.Duration
	now    func() time.Time

	mu     sync.Mutex
	causes map[string]*failureCause
}

type failureCause struct {
	logged time.Time // when its last line was written
	missed int       // occurrences since then, not written
}

// report logs the backend failure err of the operation op, or counts it
// when its cause was logged less than an interval ago.
func (f *failureLog) report(ctx context.Context, op string, err error) {
	code, cause := failureCauseOf(err)
	if code == idemkit.CodeAborted || f.logger == nil { // the caller's ctx ended: not the backend's doing; or a zero Guard
		return
	}
	now := f.now()
	f.mu.Lock()
	c := f.causes[cause]
	if c != nil && now.Sub(c.logged) < f.every {
		c.missed++
		f.mu.Unlock()
		return
	}
	missed := 0
	if c == nil {
		if f.causes == nil || len(f.causes) >= maxFailureCauses {
			f.causes = make(map[string]*failureCause)
		}
		c = &failureCause{}
		f.causes[cause] = c
	} else {
		missed = c.missed
	}
	c.logged, c.missed = now, 0
	f.mu.Unlock()

	attrs := []slog.Attr{slog.String("op", op), slog.String("code", code.String()), slog.String("cause", cause), slog.String("error", err.Error())}
	msg := "idempotency: the backend failed; calls that need it are refused as unavailable until it answers again"
	if code.Permanent() {
		msg = "idempotency: the backend refuses the store's requests until its setup is fixed (the error says how); calls are refused"
	}
	if missed > 0 {
		attrs = append(attrs, slog.Int("repeated", missed), slog.Duration("interval", f.every))
	}
	f.logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}

// failureCauseOf returns the code of err and the text that tells its
// cause apart from others: the code and detail of the backend's coded
// error, or the error's type when it has none.
func failureCauseOf(err error) (idemkit.Code, string) {
	var ie *idemkit.Error
	if errors.As(err, &ie) {
		return ie.Code, ie.Code.String() + ": " + ie.Detail
	}
	return idemkit.CodeUnknown, fmt.Sprintf("%T", err)
}
