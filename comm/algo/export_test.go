package algo

// NewMemWorld builds n Comms over an in-memory test transport; with payload
// the transport is a PayloadReceiver that delivers in random pieces.
var NewMemWorld = newMemWorld

// NewMemEagerWorld builds n Comms over an in-memory test transport that is
// a PayloadReceiver and an EagerSender (sends of up to 4 KiB).
var NewMemEagerWorld = newMemEagerWorld

// HierPlans are the plans of the hierarchical all-reduce.
var HierPlans = []string{"rs", "ar", "leader"}

// ForceHierPlan makes the hierarchical all-reduce run plan ("rs", "ar",
// "leader") wherever the layout allows it, whatever the cost model says.
func ForceHierPlan(t *Tuning, plan string) {
	t.hierPlan = map[string]hierKind{"rs": hierRS, "ar": hierAR, "leader": hierLeader}[plan]
}

// HierPlan is the plan the cost model picks for the hierarchical
// all-reduce of n bytes over l ("" where it does not apply).
func HierPlan(t Tuning, n int, l Layout) string {
	k, _ := hierPlan(t, n, l)
	return map[hierKind]string{hierRS: "rs", hierAR: "ar", hierLeader: "leader"}[k]
}

// NewMemHostWorld builds Comms over an in-memory test transport that is a
// HostMap: rank r on host hosts[r]. kind "eager" makes it a
// PayloadReceiver and an EagerSender, "staged" neither.
var NewMemHostWorld = newMemHostWorld
