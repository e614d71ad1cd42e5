package middleware_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// Do makes a queue consumer idempotent: a redelivered message gets the
// first result back instead of charging twice.
func ExampleDo() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	type Charge struct {
		ID     string
		Amount int
	}
	msg := struct {
		OrderID string
		Amount  int
	}{"order-7", 1250}
	charges := 0
	chargeCard := func(ctx context.Context) (Charge, error) {
		charges++
		return Charge{ID: fmt.Sprintf("ch_%d", charges), Amount: msg.Amount}, nil
	}

	for delivery := 1; delivery <= 3; delivery++ {
		c, replayed, err := middleware.Do(context.Background(), guard, "msg:"+msg.OrderID, msg, chargeCard)
		fmt.Println(delivery, c.ID, c.Amount, replayed, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 1 ch_1 1250 false <nil>
	// 2 ch_1 1250 true <nil>
	// 3 ch_1 1250 true <nil>
	// charges: 1
}
