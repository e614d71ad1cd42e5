package demo

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// Flags are the backend flags every demo server shares.
type Flags struct {
	Addr  string
	Store string
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&f.Addr, "addr", defaultAddr, "listen address")
	fs.StringVar(&f.Store, "store", "memory", "backend for locks and records: memory")
}

// Guard builds the guard on the chosen backends. It returns a function that
// closes them.
func (f *Flags) Guard(logger *slog.Logger, opts ...middleware.Option) (*middleware.Guard, func(), error) {
	var (
		s     store.Store
		l     lock.Locker
		close = func() {}
	)
	switch f.Store {
	case "memory":
		s, l = memstore.New(), memlock.New()
	default:
		return nil, nil, fmt.Errorf("unknown -store %q (this build knows: memory)", f.Store)
	}
	g, err := middleware.New(s, l, append([]middleware.Option{middleware.WithLogger(logger)}, opts...)...)
	if err != nil {
		close()
		return nil, nil, err
	}
	return g, close, nil
}
