package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
)

// The checkout's steps, in order, and their counters.
const (
	StepReserve = "reserve"
	StepCharge  = "charge"
	StepEmail   = "email"
)

// checkoutStats counts the checkout's work: each step's executions (a step
// a retry resumed after does not run again, so it is not counted again)
// and the checkouts that finished here.
type checkoutStats struct {
	reserve, charge, email, done atomic.Int64
}

// Reservation, Charge and Email are the results of the checkout's steps,
// recorded as its recovery points.
type (
	Reservation struct {
		ID   string `json:"id"`
		Item string `json:"item"`
	}
	Charge struct {
		ID     string `json:"id"`
		Amount string `json:"amount"`
	}
	Email struct {
		ID string `json:"id"`
	}
)

// CheckoutAnswer is POST /checkout's answer.
type CheckoutAnswer struct {
	Reservation Reservation `json:"reservation"`
	Charge      Charge      `json:"charge"`
	Email       Email       `json:"email"`
}

// Checkout is the guarded handler of POST /checkout: three steps
// (reserve, charge, email) run with [middleware.StepOf], each recorded
// as a recovery point before the next begins. A retry of a checkout that
// stopped part-way (its process died, it lost its lease, a step failed)
// resumes after the last recorded step: the reservation and the charge it
// answers are the ones recorded, and their steps do not run again.
//
// The request body is {"item": "book", "amount": "12.50"}. With faults,
// the query parameter crash=after-reserve or crash=after-charge ends the
// process (SIGKILL, as a crash would) the moment that step, run by this
// process, is recorded; a step replayed from its recovery point does not
// crash it, so the retry on another instance completes.
func (s *Service) Checkout() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Item   string `json:"item"`
			Amount string `json:"amount"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil || req.Item == "" {
			http.Error(w, `the body must be {"item": "...", "amount": "..."}`, http.StatusUnprocessableEntity)
			return
		}
		crash := ""
		if s.Faults {
			crash = r.URL.Query().Get("crash")
		}
		ctx := r.Context()
		ran := false
		res, err := middleware.StepOf(ctx, StepReserve, func(ctx context.Context) (Reservation, error) {
			ran = true
			return Reservation{ID: fmt.Sprintf("res_%d", s.checkout.reserve.Add(1)), Item: req.Item}, nil
		})
		if err != nil {
			stepFailed(w, err)
			return
		}
		crashIf(ran && crash == "after-reserve")
		ran = false
		ch, err := middleware.StepOf(ctx, StepCharge, func(ctx context.Context) (Charge, error) {
			ran = true
			return Charge{ID: fmt.Sprintf("ch_%d", s.checkout.charge.Add(1)), Amount: req.Amount}, nil
		})
		if err != nil {
			stepFailed(w, err)
			return
		}
		crashIf(ran && crash == "after-charge")
		em, err := middleware.StepOf(ctx, StepEmail, func(ctx context.Context) (Email, error) {
			return Email{ID: fmt.Sprintf("em_%d", s.checkout.email.Add(1))}, nil
		})
		if err != nil {
			stepFailed(w, err)
			return
		}
		s.checkout.done.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(CheckoutAnswer{Reservation: res, Charge: ch, Email: em})
	})
}

// crashIf ends the process at once, as a crash would, when cond holds.
func crashIf(cond bool) {
	if cond {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// stepFailed answers a step that could not run or be recorded: 503 when
// the claim was lost (another instance took the checkout over), 500
// otherwise. Neither is recorded, so a retry resumes.
func stepFailed(w http.ResponseWriter, err error) {
	if errors.Is(err, idemkit.ErrLeaseLost) {
		http.Error(w, "the checkout was taken over: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "checkout step failed: "+err.Error(), http.StatusInternalServerError)
}
