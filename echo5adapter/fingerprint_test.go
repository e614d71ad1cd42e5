package echo5adapter_test

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idemkit/idemkit/internal/httpsuite"
)

// TestEscapedSlashesAreDifferentRoutes: echo routes on the escaped path,
// so /transfer/a%2Fb/c (from "a/b") and /transfer/a/b%2Fc (to "b/c") are
// different transfers, whose decoded paths are one; so are
// /transfer/a%2Fb/{c} and /transfer/a/b%2F{c}, sent with a raw '{'.
func TestEscapedSlashesAreDifferentRoutes(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.POST("/transfer/:from/:to", func(c *echo.Context) error {
		runs.Add(1)
		// echo gives the path values as they are in the escaped path.
		from, err1 := url.PathUnescape(c.Param("from"))
		to, err2 := url.PathUnescape(c.Param("to"))
		if err1 != nil || err2 != nil {
			return echo.ErrBadRequest
		}
		return c.JSON(http.StatusOK, map[string]string{"from": from, "to": to})
	}, newIdem(t, httpsuite.NewGuard(t)))
	base := httpsuite.Serve(t, e)
	httpsuite.CheckEscapedSlashes(t, base, runs.Load)
	httpsuite.CheckEscapedSlashesBesideRawCharacters(t, base)
}

// TestCaseVariantMembersAreDifferentBodies: Bind into a struct with an
// Amount field reads {"amount":1,"Amount":1000} as 1000 and
// {"Amount":1000,"amount":1} as 1; one never replays the other.
func TestCaseVariantMembersAreDifferentBodies(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.POST("/orders/:id/pay", payOrder(&runs), newIdem(t, httpsuite.NewGuard(t)))
	httpsuite.CheckCaseVariantMembers(t, httpsuite.Serve(t, e), runs.Load)
}
