package firestorelock

// SetBeforeSweepTx makes l call f between each sweep query and the
// transaction that re-checks its documents, so a test can change them in
// between.
func SetBeforeSweepTx(l *Locker, f func()) { l.beforeSweepTx = f }
