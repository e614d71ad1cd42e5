package ginadapter_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/internal/httpsuite"
)

// TestEscapedSlashesAreDifferentRoutes: gin with UseRawPath routes on the
// escaped path, so /transfer/a%2Fb/c (from "a/b") and /transfer/a/b%2Fc
// (to "b/c") are different transfers, whose decoded paths are one; so are
// /transfer/a%2Fb/{c} and /transfer/a/b%2F{c}, sent with a raw '{'.
func TestEscapedSlashesAreDifferentRoutes(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.UseRawPath = true
	r.POST("/transfer/:from/:to", newIdem(t, httpsuite.NewGuard(t)), func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusOK, gin.H{"from": c.Param("from"), "to": c.Param("to")})
	})
	base := httpsuite.Serve(t, r)
	httpsuite.CheckEscapedSlashes(t, base, runs.Load)
	httpsuite.CheckEscapedSlashesBesideRawCharacters(t, base)
}

// TestCaseVariantMembersAreDifferentBodies: ShouldBindJSON into a struct
// with an Amount field reads {"amount":1,"Amount":1000} as 1000 and
// {"Amount":1000,"amount":1} as 1; one never replays the other.
func TestCaseVariantMembersAreDifferentBodies(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.POST("/orders/:id/pay", newIdem(t, httpsuite.NewGuard(t)), func(c *gin.Context) {
		runs.Add(1)
		var in struct{ Amount int }
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		c.JSON(http.StatusOK, gin.H{"paid": c.Param("id"), "amount": in.Amount})
	})
	httpsuite.CheckCaseVariantMembers(t, httpsuite.Serve(t, r), runs.Load)
}
