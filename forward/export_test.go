package forward

// SetBodyBudget lets tests hold entries without their bodies, as in a
// backlog, without writing megabytes.
func SetBodyBudget(f *Forwarder, n int) { f.bodyBudget = n }
