package idemkit_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

func TestFenceForms(t *testing.T) {
	cases := []struct {
		f idemkit.Fence
		s string
	}{
		{0, "000000000000000"}, {1, "000000000000001"}, {42, "000000000000042"},
		{idemkit.FenceWarn, "090000000000000"}, {idemkit.FenceMax, "900000000000000"}, {999_999_999_999_999, "999999999999999"},
	}
	for _, c := range cases {
		if c.f.String() != c.s {
			t.Fatalf("%d.String() = %q; want %q", c.f, c.f.String(), c.s)
		}
		p, err := idemkit.ParseFence(c.s)
		if err != nil || p != c.f || p.Uint64() != uint64(c.f) {
			t.Fatalf("ParseFence(%q) = %v, %v", c.s, p, err)
		}
	}
	for _, bad := range []string{"", "1", "00000000000001", "0000000000000001", "-00000000000001", "00000000000000a", "+00000000000001"} {
		if _, err := idemkit.ParseFence(bad); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("ParseFence(%q) = %v", bad, err)
		}
	}
	// String order is numeric order.
	for a := idemkit.Fence(0); a < 1200; a += 7 {
		for _, b := range []idemkit.Fence{a + 1, a * 10, a + 999, idemkit.FenceMax} {
			if (a < b) != (a.String() < b.String()) || a.Compare(b) != strings.Compare(a.String(), b.String()) {
				t.Fatalf("order of %v and %v differs between numbers and strings", a, b)
			}
		}
	}
	if idemkit.Fence(3).Compare(3) != 0 || idemkit.Fence(4).Compare(3) != 1 || idemkit.Fence(2).Compare(3) != -1 {
		t.Fatal("Compare")
	}
	js, err := json.Marshal(struct{ F idemkit.Fence }{7})
	if err != nil || string(js) != `{"F":"000000000000007"}` {
		t.Fatalf("JSON %s, %v", js, err)
	}
	var back struct{ F idemkit.Fence }
	if err := json.Unmarshal(js, &back); err != nil || back.F != 7 {
		t.Fatalf("JSON round trip %v, %v", back.F, err)
	}
	if err := json.Unmarshal([]byte(`{"F":"7"}`), &back); err == nil {
		t.Fatal("a short fence string was accepted")
	}
}
