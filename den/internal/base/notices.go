package base

import "sync"

// Notices remembers which conditions are currently reported, so that a
// condition seen every second is logged once when it starts and once when it
// clears, never every second.
type Notices struct {
	mu     sync.Mutex
	active map[string]string
}

// Set marks key as active with detail; it reports true when the condition
// is new or its detail changed (the caller then logs it).
func (n *Notices) Set(key, detail string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.active == nil {
		n.active = map[string]string{}
	}
	old, ok := n.active[key]
	n.active[key] = detail
	return !ok || old != detail
}

// Clear marks key as inactive; it reports true when it was active (the
// caller then logs that it cleared).
func (n *Notices) Clear(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.active[key]
	delete(n.active, key)
	return ok
}

// Keep clears every key with the given prefix that is not in seen, and
// returns the keys it cleared.
func (n *Notices) Keep(prefix string, seen map[string]bool) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var cleared []string
	for k := range n.active {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix && !seen[k] {
			delete(n.active, k)
			cleared = append(cleared, k)
		}
	}
	return cleared
}
