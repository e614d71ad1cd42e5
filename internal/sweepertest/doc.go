// Package sweepertest checks a background sweeper built on
// [github.com/idemkit/idemkit/store/engine.SweepEvery] (the StartSweeper methods of the PostgreSQL and
// Firestore backends) against its real server: that it collects an expired
// record on its own, that it logs its failures with their code and its
// message but never a key, and that stop may be called more than once.
// [Logs] is the log sink such a test reads while the sweeper writes to it.
//
// It uses the standard testing package only; its waits are guards against
// hangs (a minute), never timing claims.
package sweepertest
