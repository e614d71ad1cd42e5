package testenv

import "testing"

// TestNewPostgresExtraSettings: the settings NewPostgres is given override
// the package's (fsync=off), also across a restart, and a server without
// them keeps the package's.
func TestNewPostgresExtraSettings(t *testing.T) {
	show := func(s *PostgresServer, param string) string {
		c := pgConnect(t, s)
		c.write('Q', []byte("SHOW "+param+"\x00"))
		return c.until('Z')
	}
	s := NewPostgres(t, "-c", "fsync=on")
	if got := show(s, "fsync"); got != "on" {
		t.Fatalf("fsync with -c fsync=on: %q, want on", got)
	}
	if got := show(s, "max_connections"); got != "400" {
		t.Fatalf("max_connections beside the extra setting: %q, want the package's 400", got)
	}
	s.Restart(t)
	if got := show(s, "fsync"); got != "on" {
		t.Fatalf("fsync after a restart: %q, want on", got)
	}
	if got := show(NewPostgres(t), "fsync"); got != "off" {
		t.Fatalf("fsync without extra settings: %q, want the package's off", got)
	}
}
